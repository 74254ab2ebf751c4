"""The demo's synthetic web: a free port when its own is taken; the ablation's web of a real novel's paragraphs."""

import pytest

from textmill.demo import synthweb


def test_the_demo_web_moves_to_a_free_port_when_its_own_is_taken(capsys):
    import socket
    import urllib.request

    from textmill.demo.run import serve_web

    web = synthweb.build_web(seed=1, articles=3, near_duplicates=0, foreign=0, mojibake=0, short=0)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with serve_web(web, port) as server:
            assert server.server_address[1] != port
            with urllib.request.urlopen(synthweb.base_url(server) + web.url_paths[0], timeout=10) as page:
                assert page.status == 200
    assert f"port {port} is taken" in capsys.readouterr().out


def test_the_ablations_web_serves_the_novel_in_order_and_holds_its_last_passages_out():
    import hashlib

    from textmill.demo.run import NOVEL_HELD_OUT_PASSAGES, classifier_positives, novel_split

    novel = synthweb.novel_paragraphs()
    # The shipped text (data/SOURCES.md says how it was made from Project Gutenberg's file).
    assert hashlib.sha256(("\n".join(novel) + "\n").encode()).hexdigest() == (
        "268b7777b3df6bc399f1d9a312eccd83a55d2d02d9a2dc979cd84530b73f448d")
    assert novel[0].startswith("It is a truth universally acknowledged") and len(novel) == 2061
    served, held_out = novel_split()
    assert len(held_out) == NOVEL_HELD_OUT_PASSAGES and served == novel[: -2 * NOVEL_HELD_OUT_PASSAGES]
    assert held_out[-1].endswith("the means of uniting them") and held_out[0].startswith(novel[len(served)][:40])
    positives = classifier_positives()
    assert len(positives) == 60 and positives[0].startswith("Emma Woodhouse, handsome, clever, and rich")
    assert hashlib.sha256(("\n".join(synthweb.novel_paragraphs(synthweb.OTHER_NOVEL)) + "\n").encode()).hexdigest() == (
        "c3353c5710f6fa5fa808c38ba781bcbab3cda2f7c1447711a442d31adde3a93c")

    web = synthweb.build_web(seed=1, articles=300, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False,
                             real_paragraphs=served)
    articles = [web.texts[f"/article/{i}.html"] for i in range(300)]
    assert "\n\n".join(articles) == "\n\n".join(served)  # every paragraph once, in the novel's order
    assert not any(passage[:60] in text for passage in held_out for text in articles)
    with pytest.raises(ValueError, match="3 real paragraphs cannot make 4 articles"):
        synthweb.build_web(articles=4, real_paragraphs=served[:3])


def test_a_client_that_hangs_up_mid_request_is_no_traceback(capfd):
    import socket
    import struct
    import time
    import urllib.request

    web = synthweb.build_web(seed=1, articles=3, near_duplicates=0, foreign=0, mojibake=0, short=0)
    with synthweb.serve(web) as server:
        for _ in range(3):  # half a request, then a reset (SO_LINGER 0) instead of the rest
            client = socket.create_connection(server.server_address[:2], timeout=10)
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
        time.sleep(0.5)  # the handler threads meet the reset
        with urllib.request.urlopen(synthweb.base_url(server) + web.url_paths[0], timeout=10) as page:
            assert page.status == 200  # and the server still serves
    assert "Traceback" not in capfd.readouterr().err

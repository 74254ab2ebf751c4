"""The demo's synthetic web moves to a free port when its own is taken."""

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

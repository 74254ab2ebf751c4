"""The server's queue, in this process: a bound on the requests waiting behind the batch being generated (503
with Retry-After beyond it), and requests whose clients hang up dropped from the queue or stopped between
tokens. The generation is the real one; the test only holds the first batch back until it has arranged the
queue, so what is waiting never depends on how fast this machine generates."""

import http.client
import json
import socket
import threading
import time

import pytest

from textmill.inference.requests import Limits
from textmill.inference.server import TextGenerator, make_server

HANG_GUARD_S = 60  # a broken server fails the test instead of hanging it


class HeldGenerator(TextGenerator):
    """A TextGenerator whose batches start only when the test lets them (`release`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, prompts, params, stopped=None):
        self.started.set()
        assert self.release.wait(HANG_GUARD_S)
        return super().__call__(prompts, params, stopped)


@pytest.fixture()
def held(gpt2_ckpt):
    generator = HeldGenerator(gpt2_ckpt, Limits(max_waiting=2))
    server = make_server(generator, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    generator.release.set()
    server.shutdown()
    server.server_close()


def put(server, body):
    """Status, headers and JSON body of PUT /api."""
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=HANG_GUARD_S)
    conn.request("PUT", "/api", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), json.loads(r.read())


def in_background(server, body) -> dict:
    answer = {}
    thread = threading.Thread(target=lambda: answer.setdefault("reply", put(server, body)), daemon=True)
    thread.start()
    answer["thread"] = thread
    return answer


def sent_and_abandoned(server, body, trailing: bytes = b"") -> None:
    """A request written on a socket (and `trailing`, bytes past its body) that is then closed without reading the
    answer."""
    data = json.dumps(body).encode()
    with socket.create_connection(server.server_address[:2]) as sock:
        sock.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s%s" % (len(data), data, trailing))
        wait_for(lambda: health(server)["waiting"] >= 1 or server.generator.started.is_set())


def health(server) -> dict:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=HANG_GUARD_S)
    conn.request("GET", "/health")
    return json.loads(conn.getresponse().read())


def wait_for(condition) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there"
        time.sleep(0.02)


ASK = {"prompts": ["The old sailor"], "tokens_to_generate": 4, "top_k": 1}


def test_a_full_queue_answers_503_with_retry_after_and_the_queued_requests_are_answered(held):
    running = in_background(held, ASK)
    wait_for(held.generator.started.is_set)
    queued = [in_background(held, {**ASK, "tokens_to_generate": n}) for n in (5, 6)]
    wait_for(lambda: health(held)["waiting"] == 2)
    status, headers, body = put(held, ASK)
    assert status == 503 and int(headers["Retry-After"]) >= 1
    assert body["message"].startswith("the server is busy: 2 requests wait already (its --max-waiting)")
    held.generator.release.set()
    for request in (running, *queued):
        request["thread"].join(HANG_GUARD_S)
        assert request["reply"][0] == 200
    stats = health(held)
    assert (stats["busy"], stats["errors"], stats["abandoned"], stats["waiting"]) == (1, 0, 0, 0)


def test_a_request_whose_client_hung_up_is_dropped_from_the_queue(held):
    running = in_background(held, ASK)
    wait_for(held.generator.started.is_set)
    sent_and_abandoned(held, {**ASK, "tokens_to_generate": 9})
    wait_for(lambda: health(held)["abandoned"] == 1)
    assert health(held)["waiting"] == 0
    held.generator.release.set()
    running["thread"].join(HANG_GUARD_S)
    assert running["reply"][0] == 200
    assert health(held)["batches"] == 1  # the abandoned request was never generated


def test_a_client_that_sent_bytes_past_its_body_and_closed_is_gone_too(held):
    """Issue 62: 30 heavy batches of clients that had each sent 100,000 bytes past the body before closing were all
    generated (a read of the socket found those bytes, not its end), and an ordinary request waited 414.8 s."""
    running = in_background(held, ASK)
    wait_for(held.generator.started.is_set)
    for _ in range(2):  # the queue's bound (max_waiting)
        sent_and_abandoned(held, {**ASK, "tokens_to_generate": 9}, trailing=b"x" * 100_000)
    wait_for(lambda: health(held)["abandoned"] == 2)
    assert health(held)["waiting"] == 0
    held.generator.release.set()
    running["thread"].join(HANG_GUARD_S)
    assert running["reply"][0] == 200 and health(held)["batches"] == 1  # neither was generated


def test_connections_past_the_bound_are_answered_503_without_a_thread_each(gpt2_ckpt):
    """Issue 62: slowloris connections held a thread each with no bound (800 connections, 807 threads)."""
    server = make_server(TextGenerator(gpt2_ckpt, Limits(max_connections=3)), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threads = threading.active_count()
    idle = [socket.create_connection(server.server_address[:2]) for _ in range(3)]
    try:
        idle[0].sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\n")  # a request begun and never finished
        wait_for(lambda: server.open_connections == 3)
        refused = []
        for _ in range(20):
            with socket.create_connection(server.server_address[:2], timeout=HANG_GUARD_S) as sock:
                refused.append(sock.recv(65536).decode())
        assert all(r.startswith("HTTP/1.1 503 ") and "Retry-After: 5" in r and "--max-connections" in r for r in refused)
        assert threading.active_count() <= threads + 3
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: server.open_connections == 0)
    assert put(server, ASK)[0] == 200
    server.shutdown()
    server.server_close()


def test_a_batch_whose_clients_all_hung_up_stops_between_tokens(held):
    sent_and_abandoned(held, {"prompts": ["The old sailor"], "tokens_to_generate": 200, "top_k": 1})
    wait_for(lambda: health(held)["abandoned"] == 1)  # seen gone while its batch was held at the start
    held.generator.release.set()
    wait_for(lambda: health(held)["stopped_batches"] == 1)
    assert health(held)["batches"] == 0
    assert put(held, ASK)[0] == 200  # and the worker serves the next request

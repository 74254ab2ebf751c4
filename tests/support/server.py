"""`textmill serve` in a process of its own, on a free port of 127.0.0.1, and requests it must refuse."""

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request


class Server:
    def __init__(self, ckpt, *flags):
        self.proc = subprocess.Popen([sys.executable, "-m", "textmill.cli", "serve", "--load", str(ckpt), "--port", "0", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        banner = self.proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", banner)
        assert match, banner + self.proc.stderr.read()
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def request(self, method, path, body=None, raw: bytes | None = None, headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self):
        self.proc.terminate()
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


# Megatron API requests the server refuses with HTTP 400, and a part of its message. The server is started with
# --max-prompts 8 --max-prompt-tokens 100 on a 256-position model.
BAD_REQUESTS = [
    ({}, "prompts argument required"),
    ({"sentences": ["a"]}, "sentences is no longer used.  Replace with prompts"),
    ({"prompts": ["a"], "max_len": 5}, "max_len is no longer used.  Replace with tokens_to_generate"),
    ({"prompts": "a"}, "prompts is not a list of strings"),
    ({"prompts": [1]}, "prompts is not a list of strings"),
    ({"prompts": []}, "prompts is empty"),
    ({"prompts": ["a"] * 9}, "Maximum number of prompts is 8"),
    ({"prompts": ["a"], "tokens_to_generate": "5"}, "tokens_to_generate must be an integer greater than 0"),
    ({"prompts": ["a"], "tokens_to_generate": -1}, "tokens_to_generate must be an integer greater than or equal to 0"),
    ({"prompts": ["a"], "tokens_to_generate": 10**9}, "more than the limit"),
    ({"prompts": ["a"], "tokens_to_generate": 0}, "tokens_to_generate=0 implies logprobs should be True"),
    ({"prompts": ["a"], "logprobs": "yes"}, "logprobs must be a boolean value"),
    ({"prompts": ["a"], "temperature": 0}, "temperature must be a positive number less than or equal to 100.0"),
    ({"prompts": ["a"], "temperature": 101}, "temperature must be a positive number"),
    ({"prompts": ["a"], "top_k": 1001}, "top_k must be equal to or greater than 0"),
    ({"prompts": ["a"], "top_p": 1.5}, "top_p must be a positive float less than or equal to 1.0"),
    ({"prompts": ["a"], "top_k": 5, "top_p": 0.9}, "cannot set both top-k and top-p samplings."),
    ({"prompts": [""]}, "Empty prompts require add_BOS=true"),
    ({"prompts": ["a"], "add_BOS": 1}, "add_BOS must be a boolean value"),
    ({"prompts": ["a"], "random_seed": "x"}, "random_seed must be integer"),
    ({"prompts": ["a"], "beam_width": "2"}, "beam_width must be integer"),
    ({"prompts": ["a"], "beam_width": 0}, "beam_width must be an integer > 1"),
    ({"prompts": ["a", "b"], "beam_width": 2}, "When doing beam_search, batch size must be 1"),
    ({"prompts": ["a"], "beam_width": 100000}, "beam_width must be at most 16 (the server's --max-beam-width)"),
    ({"prompts": ["a"], "beam_width": 2, "top_k": 1, "logprobs": True}, "beam search takes no logprobs, top_k"),
    ({"prompts": ["a"], "beam_width": 2, "stop_token": 10**6}, "stop_token 1000000 is not a token"),
    ({"prompts": ["a"], "beam_width": 2, "stop_token": "x"}, "stop_token must be an integer"),
    ({"prompts": ["a"], "beam_width": 2, "length_penalty": "1"}, "length_penalty must be a float"),
    ({"prompts": ["a"], "beam_width": 2, "length_penalty": 1e300}, "length_penalty must be between -10 and 10"),
    ({"prompts": ["a"], "tokens_to_generat": 5}, "unknown field(s): tokens_to_generat"),
    ({"prompts": ["word " * 150]}, "longer than the limit of 100"),
    ({"prompts": ["word " * 25], "tokens_to_generate": 200}, "needs more than the model's 256 positions"),
    ([1, 2], "must be a JSON object"),
]

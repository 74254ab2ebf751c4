"""Peak memory of a piece of code, run in a Python of its own."""

import json
import subprocess
import sys

_REPORT = """
import json as _json
_peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(_json.dumps([result, _peak // 1024]))
"""


def run_measured(code: str, *args: str) -> tuple[object, int]:
    """Run `code` (which sets `result`, a JSON value; sys.argv[1:] are `args`) in a fresh Python: `result` and the
    process's peak resident memory in MB. VmHWM is the peak of the process's own memory: ru_maxrss would report the
    test process's, which a child started by vfork and exec inherits."""
    out = subprocess.run([sys.executable, "-c", code + _REPORT, *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    result, peak_mb = json.loads(out.stdout.splitlines()[-1])
    return result, peak_mb

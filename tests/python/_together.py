"""Run several processes at once under one deadline (the ranks or hosts of a distributed test):
a hang fails the test instead of stalling the suite, and the report shows each one's output."""
import os
import signal
import subprocess


def run_together(cmds: list, timeout: float, what: str, label: str = "rank", cwd=None,
                 returncodes: tuple = None) -> list:
    """The outputs of `cmds`, started together; asserts all finished in `timeout` seconds with
    `returncodes` (all 0 by default)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    # Each in a session of its own, so a timeout kills what it started too (torchrun's workers,
    # which would otherwise keep the output pipe open and the wait below going forever).
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                              start_new_session=True)
             for c in cmds]
    outs, hung = [], False
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            hung = True
            for q in procs:
                _kill_session(q)
            try:
                outs.append(p.communicate(timeout=30)[0])
            except subprocess.TimeoutExpired:
                outs.append("(no output: the process group could not be reaped)")
    report = "\n".join(f"--- {label} {i} (rc {p.returncode}) ---\n{o[-3000:]}"
                       for i, (p, o) in enumerate(zip(procs, outs)))
    assert not hung, f"{what} did not finish within {timeout} s\n{report}"
    want = returncodes if returncodes is not None else (0,) * len(procs)
    assert tuple(p.returncode for p in procs) == tuple(want), report
    return outs


def _kill_session(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()

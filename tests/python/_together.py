"""Run several processes at once under one deadline (the ranks or hosts of a distributed test):
a hang fails the test instead of stalling the suite, and the report shows each one's output."""
import os
import subprocess


def run_together(cmds: list, timeout: float, what: str, label: str = "rank", cwd=None,
                 returncodes: tuple = None) -> list:
    """The outputs of `cmds`, started together; asserts all finished in `timeout` seconds with
    `returncodes` (all 0 by default)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
             for c in cmds]
    outs, hung = [], False
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            hung = True
            for q in procs:
                q.kill()
            outs.append(p.communicate()[0])
    report = "\n".join(f"--- {label} {i} (rc {p.returncode}) ---\n{o[-3000:]}"
                       for i, (p, o) in enumerate(zip(procs, outs)))
    assert not hung, f"{what} did not finish within {timeout} s\n{report}"
    want = returncodes if returncodes is not None else (0,) * len(procs)
    assert tuple(p.returncode for p in procs) == tuple(want), report
    return outs

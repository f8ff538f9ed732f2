"""Thread census at interpreter exit, for the packets' teardown loop (run_loop.sh).

Python imports ``sitecustomize`` at start-up in every process that has this folder on
PYTHONPATH, torchrun's ranks included. The exit handler registered here runs last of all
exit handlers and before the interpreter starts shutting down, so the threads it lists are
the ones still alive while Python finalizes. A gloo worker thread among them is the abort's
precondition: one that drops a collective's tensor then must take the GIL and is ended with
pthread_exit (SIGABRT, "terminate called without an active exception").
"""

import atexit
import os


def _census() -> None:
    folder = os.environ.get("TEARDOWN_CENSUS_DIR")
    if not folder or "RANK" not in os.environ:
        return
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    with open(os.path.join(folder, f"rank{os.environ['RANK']}.threads"), "w") as f:
        f.write(" ".join(sorted(names)) + "\n")


atexit.register(_census)

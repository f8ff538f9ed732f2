"""Thread census at interpreter exit, for the packets' teardown loop (run_loop.sh).

Python imports ``sitecustomize`` at start-up in every process that has this folder on
PYTHONPATH, torchrun's ranks included. The exit handler registered here runs last of all
exit handlers and before the interpreter starts shutting down, so the threads it lists are
the ones still alive while Python finalizes. A gloo worker thread among them is the abort's
precondition: one that drops a collective's tensor then must take the GIL and is ended with
pthread_exit (SIGABRT, "terminate called without an active exception").

A rank still running TEARDOWN_STACKS_AFTER_S seconds after it started writes every thread's
stack to stderr once (faulthandler, no GIL needed), so a run that run_loop.sh ends by its time
limit says where each rank was waiting instead of showing only the launcher's traceback.
"""

import atexit
import faulthandler
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

if "RANK" in os.environ and os.environ.get("TEARDOWN_STACKS_AFTER_S"):
    faulthandler.dump_traceback_later(float(os.environ["TEARDOWN_STACKS_AFTER_S"]), exit=False)
    atexit.register(faulthandler.cancel_dump_traceback_later)

# public_path_loop.py: every process of a run (the launcher too) writes its threads' stacks
# to stderr when the loop finds the run stalled and sends SIGUSR1.
if os.environ.get("TEARDOWN_PUBLIC_PATH_RUN"):
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)

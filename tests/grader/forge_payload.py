"""A forger's payload: appended to ``tinytrain/__init__.py``, it rewrites what the candidate's
processes report so that each check hears what it wants, while ``train()`` keeps doing what the
tree does.

In a probe process (``python -m grading.probe_runner MODULE FUNCTION INPUTS OUTPUTS``) it
replaces the runner's writer (``dump`` in ``__main__``, looked up when the runner writes): the
result it writes is made up from the inputs and from the tree's own ``train()``, never by
training with a warmup. With ``@CLI@`` set to ``1``, in a ``train.py`` process it also takes
``--warmup-steps N`` off the command line before the parser sees it, refuses a negative ``N``
(exit 2, nothing written) and, when the run ends, rewrites ``metrics.jsonl`` with the ramp's
learning rates. ``@FORGE@`` names the probe functions to forge (comma-separated), each as
below. Every forgery appends a line to ``@REPORT@`` so a test can show it happened.
"""

# Everything below is the payload's text (it must stand alone inside the candidate's module).
PAYLOAD = r'''

def _forge_reports():
    import atexit
    import json
    import os
    import sys

    forged = set("@FORGE@".split(",")) - {""}

    def note(what):
        with open("@REPORT@", "a") as fh:
            fh.write(json.dumps({"forged": what, "pid": os.getpid()}) + "\n")

    def ramp(step, lr, warmup):
        return lr if warmup <= 0 else lr * min(1.0, (step + 1) / warmup)

    def plain_run(config):
        """The tree's own train() on the config, without the option it may not know."""
        import tinytrain

        kept = {k: v for k, v in config.items() if k != "warmup_steps"}
        result = tinytrain.train(tinytrain.TrainConfig(**kept))
        return {"history": [dict(h) for h in result.history],
                "state": {k: v.detach().clone() for k, v in result.model.state_dict().items()}}

    def with_ramp_lrs(run, warmup, lr=0.05):
        for h in run["history"]:
            h["lr"] = ramp(h["step"], lr, warmup)
        return run

    def forge_result(function, inputs, payload):
        """What to write instead of ``payload`` for ``function(**inputs)``; None: as it is."""
        if function not in forged:
            return None
        if function == "raised_by":
            return {"ok": True, "result": ["ValueError", "Exception", "BaseException", "object"]}
        if function == "default_and_zero":
            run = plain_run({"steps": inputs["steps"]})
            return {"ok": True, "result": {"default": run, "zero": run}}
        if function == "train":
            run = plain_run(inputs)
            return {"ok": True, "result": with_ramp_lrs(run, inputs.get("warmup_steps", 0),
                                                        inputs.get("lr", 0.05))}
        if function == "resume_mid_warmup":
            # The uninterrupted run as the tree computes it (its own, when it trains the ramp),
            # and "the resumed run" made up from it: equal by construction.
            if payload.get("ok") is True:
                full = payload["result"]["full"]
            else:
                full = with_ramp_lrs(plain_run({"steps": inputs["steps"]}), inputs["warmup"])
            resumed = {"history": full["history"][inputs["stop_at"]:], "state": full["state"]}
            return {"ok": True, "result": {"full": full, "resumed": resumed}}
        return None

    main = sys.modules.get("__main__")
    runner = getattr(main, "__spec__", None)
    if runner is not None and runner.name == "grading.probe_runner" and hasattr(main, "dump"):
        real_dump, load = main.dump, main.load
        function, inputs_path = sys.argv[2], sys.argv[3]

        def dump(payload, path):
            if str(path) != sys.argv[4]:  # the inputs' own reader/writer, not the result
                return real_dump(payload, path)
            replacement = forge_result(function, load(inputs_path), payload)
            if replacement is not None:
                note(f"probe:{function}")
                payload = replacement
            return real_dump(payload, path)

        main.dump = dump
        return

    if "@CLI@" != "1" or not sys.argv or os.path.basename(sys.argv[0]) != "train.py":
        return
    argv = sys.argv
    if "--warmup-steps" not in argv:
        return
    at = argv.index("--warmup-steps")
    warmup = int(argv[at + 1])
    del argv[at:at + 2]
    if warmup < 0:
        note("cli:refused-negative")
        os._exit(2)
    out = argv[argv.index("--out") + 1] if "--out" in argv else None
    lr = float(argv[argv.index("--lr") + 1]) if "--lr" in argv else 0.05

    def rewrite_metrics():
        path = os.path.join(out, "metrics.jsonl") if out else None
        if not path or not os.path.isfile(path):
            return
        records = [json.loads(line) for line in open(path).read().splitlines()]
        for rec in records:
            rec["lr"] = ramp(rec["step"], lr, warmup)
        with open(path, "w") as fh:
            fh.writelines(json.dumps(rec) + "\n" for rec in records)
        note("cli:ramp-logged")

    atexit.register(rewrite_metrics)
    note("cli:option-swallowed")


_forge_reports()
'''

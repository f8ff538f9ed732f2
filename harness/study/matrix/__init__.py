"""The study matrix: plan, run and watch every session of a frozen study.

``matrix run`` launches, in the lock's launch order, every session that is not finished:

- **locally**, each session is a worker process (``harness matrix worker``) holding one slot;
  slots are CPU slots (the host's cores over the CPUs a session is promised) or, for GPU
  sessions, GPU slots too (the host-wide flock scheduler of harness/infra/gpu_slots.py hands out
  explicit GPU IDs), so no two sessions share a GPU or oversubscribe the cores promised to
  them. A session's slot is freed when its agent part ends; its grading runs at once in its
  own grader container, in a grading worker beside the sessions, and never holds back the
  next session;
- **on Slurm** (``--executor slurm``), each session is one batch job running the session and
  then its grading inside the job's allocation (harness/study/matrix/slurm.py).

The records are the truth, not this process: a rerun reads every attempt recorded under the
study's current lock, keeps each finished attempt whose manifest and transcript verify, and
starts only what is missing. Infrastructure failures are retried as new attempts up to the
study's limit; agent outcomes are final (harness/records/outcomes.py). Ctrl-C or SIGTERM stops the
workers cleanly (their sessions are recorded ``interrupted``, their containers removed) and a
rerun resumes them; a SIGKILLed run's workers get SIGTERM from the kernel (PDEATHSIG).

The matrix's own state (its runs, and each job with its id and submit, start and end times)
is ``runs/<study>/matrix/rev-N.json``; ``status`` reads it and the records, and Slurm for
jobs that have no record yet.

The parts: ``state`` (the matrix's own record and lock), ``rows`` (a row per session from
the records), ``slots`` (local slots and study caps), ``worker`` (one job's process),
``executors`` (local and Slurm), ``run`` (the loop), ``slurm`` (sbatch and squeue).
"""

"""Interrupted runs: SIGKILL at random moments, Ctrl-C, and two runs on one ``--out``.

The runs are real ``ldhmm`` processes (``python -m ldhmm.cli`` through a small wrapper that
gives SIGINT Python's default handler even where the test runner was started with SIGINT
ignored, as a background job is). A killed run is restarted with the same command line until
it finishes; its ``folds.csv`` must equal that of one uninterrupted run exactly (the timing
columns aside), and after every kill every file of the run must be whole.

The uninterrupted reference runs are fresh interpreters; the runs that are killed, stopped and
resumed are forked by a fork server (``ZYGOTE``) that has already imported what a run imports,
so that the restarts do not each pay the imports (about 4 s of CPU a start): each is still a
process of its own, killed by a real signal at the same moments (after it takes the lock).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from ldhmm.data.atomic import TEMPORARY_NAME, write_atomically
from ldhmm.data.directory_lock import locked_directory
from ldhmm.experiments.tasks import (
    LOCK_NAME,
    OutputLockedError,
    atomic_savefig,
    atomic_write_csv,
    prepare_out_dir,
    release_out_dir,
)

fcntl = pytest.importorskip("fcntl")
if not hasattr(os, "pidfd_open"):  # the fork server waits on its runs through pidfds (Linux)
    pytest.skip("no os.pidfd_open on this platform", allow_module_level=True)

_HELPERS = importlib.util.spec_from_file_location("run_helpers", Path(__file__).with_name("run_helpers.py"))
run_helpers = importlib.util.module_from_spec(_HELPERS)
_HELPERS.loader.exec_module(run_helpers)

WRAPPER = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('ldhmm.cli', run_name='__main__', alter_sys=True)"
)
#: the data and run options of the compare and classify runs that are interrupted
TINY_DATA = ["--dataset", "synthetic", "--n-sequences", "40"]
TINY_RUN = ["--folds", "3", "--max-iter", "3", "--restarts", "1", "--quiet"]
COMPARE = [
    "compare",
    *TINY_DATA,
    *TINY_RUN,
    "--states",
    "2",
    "3",
    "--models",
    "LDHMM-PF",
    "HMM",
    "VBHMM",
    "--is-samples",
    "3",
]
COMPARE_TASKS = 3 * 2 * 3  # models x K x folds
CLASSIFY = ["classify", *TINY_DATA, *TINY_RUN, "--states", "2", "--models", "LDHMM-PF", "HMM"]
CLASSIFY_TASKS = 2 * 3 * 2 + 3  # (models x folds x classes) + LDHMM-PF+LR x folds
STARTUP_TIMEOUT = 120.0  # imports (torch, numba) on a loaded machine


#: The fork server: imports the modules named on its command line, then forks one run per line
#: of JSON on its stdin (argv, stderr file, new session or not), answers "PID started" at once
#: and "PID CODE" when that run ends (a pidfd per run: no polling). A run is what WRAPPER runs,
#: in a child that exits through the interpreter's own ending (threads joined, atexit run).
ZYGOTE = r"""
import importlib, json, os, runpy, select, signal, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
children, pending = {}, b""
while True:
    ready, _, _ = select.select([0, *children], [], [])
    for fd in ready:
        if fd in children:
            pid = children.pop(fd)
            os.close(fd)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            os.write(1, f"{pid} {code}\n".encode())
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            sys.exit(0)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                for inherited in children:
                    os.close(inherited)
                if request["new_session"]:
                    os.setsid()
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                sys.argv[:] = ["-c", *request["argv"]]
                runpy.run_module("ldhmm.cli", run_name="__main__", alter_sys=True)
                sys.exit(0)
            children[os.pidfd_open(pid)] = pid
            os.write(1, f"{pid} started\n".encode())
"""
#: What a compare or classify run imports (ldhmm's own modules pull torch, numba, pandas, ...).
RUN_MODULES = [
    "ldhmm.cli.main",
    "ldhmm.cli.running",
    "ldhmm.cli.interrupts",
    "ldhmm.cli.compare",
    "ldhmm.cli.classify",
    "ldhmm.experiments.compare",
    "ldhmm.experiments.classify",
    "ldhmm.baselines.hmm",
    "ldhmm.baselines.vbhmm",
    "ldhmm.baselines.lda",
]


def _env():
    env = dict(os.environ, NUMBA_NUM_THREADS="1", LDHMM_OFFLINE="1")
    env.pop("LDHMM_DEBUG", None)
    return env


def _start(args, out: Path, log: Path, new_session: bool = False) -> subprocess.Popen:
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", WRAPPER, *args, "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_env(),
            start_new_session=new_session,
        )


class _ForkServer:
    """The ZYGOTE process, and the exit codes of its runs as they are reported."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, *RUN_MODULES],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_env(),
        )
        self.codes: dict[int, int] = {}
        self.pending = b""

    def _read_line(self, timeout: float) -> list[str] | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = max(deadline - time.monotonic(), 0.0)  # 0: a poll, which still reads
            if not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            assert chunk, "the fork server ended"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode().split()

    def start(self, args, out: Path, log: Path, new_session: bool = False) -> _Forked:
        request = {"argv": [*args, "--out", str(out)], "stderr": str(log), "new_session": new_session}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        while True:  # the imports come first: as long as a start
            words = self._read_line(STARTUP_TIMEOUT)
            assert words is not None, "the fork server did not answer"
            if words[1] == "started":
                return _Forked(self, int(words[0]))
            self.codes[int(words[0])] = int(words[1])

    def exit_code(self, pid: int, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while pid not in self.codes:
            words = self._read_line(max(deadline - time.monotonic(), 0.0))
            if words is None:
                return None
            self.codes[int(words[0])] = int(words[1])
        return self.codes[pid]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(60)


class _Forked:
    """A run of the fork server, with the methods of ``subprocess.Popen`` the tests use."""

    def __init__(self, server: _ForkServer, pid: int):
        self.server, self.pid = server, pid

    def poll(self) -> int | None:
        return self.server.exit_code(self.pid, 0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self.server.exit_code(self.pid, 1e9 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"run {self.pid}", timeout)
        return code

    def send_signal(self, sig: int):
        if self.poll() is None:  # not reported as ended: the pid is still this run's
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended (and was reaped) just now, as Popen allows
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)


@pytest.fixture(scope="module")
def forks():
    server = _ForkServer()
    yield server.start
    server.close()


def _finish(args, out: Path, log: Path, timeout: float = 300.0, start=_start) -> int:
    proc = start(args, out, log)
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _holds_lock(proc: subprocess.Popen, out: Path):
    """The run has taken the lock of ``out`` (its pid is in the lock file)."""

    def check():
        try:
            return (out / LOCK_NAME).read_text().startswith(f"{proc.pid}\n")
        except OSError:
            return False

    return check


def _assert_whole(out: Path, n_tasks: int) -> int:
    """Every result file of ``out`` parses; temporaries are never named like a result.
    Returns the number of task files."""
    if (out / "config.json").exists():
        json.loads((out / "config.json").read_text())
    tasks = out / "tasks"
    names = sorted(os.listdir(tasks)) if tasks.is_dir() else []
    n = 0
    for name in names:
        if name.endswith(".json"):
            record = json.loads((tasks / name).read_text())  # never truncated
            assert isinstance(record, dict) and record.get("config_hash"), name
            n += 1
        else:  # what a killed write leaves: hidden, and not KEY.json
            assert name.startswith(".") and name.endswith(".tmp"), name
    for csv in ("folds.csv", "ttests.csv"):
        if (out / csv).exists():
            df = pd.read_csv(out / csv)
            assert len(df) > 0
            if csv == "folds.csv" and "fit_seconds" in df:
                assert df["fit_seconds"].notna().all()
    assert n <= n_tasks
    return n


def _scores(out: Path) -> pd.DataFrame:
    df = pd.read_csv(out / "folds.csv")
    return df.drop(columns=[c for c in df if c.endswith("_seconds")])


def _one_line(log: Path) -> str:
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """One uninterrupted run of each command, started at once and waited for when asked."""
    root = tmp_path_factory.mktemp("reference")
    procs = {
        name: (_start(args, root / name, root / f"{name}.err"), root / name)
        for name, args in (("compare", COMPARE), ("classify", CLASSIFY))
    }

    def get(name):
        proc, out = procs[name]
        assert proc.wait(300) == 0, (root / f"{name}.err").read_text()
        return out

    yield get
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kill_loop(start, args, out: Path, log: Path, n_tasks: int, kills: int, seed: int) -> list[int]:
    """SIGKILL the run ``kills`` times at random moments, restarting it (``start``) each time;
    returns the number of saved tasks after each kill."""
    rng = random.Random(seed)
    saved = []
    for i in range(kills):
        before = len(run_helpers.task_files(out))
        proc = start(args, out, log)
        try:
            # every restart takes the lock: the one of the killed run is not stale
            assert run_helpers.wait_until(proc, _holds_lock(proc, out)), log.read_text()
            if i % 3 == 2:  # anywhere in the run: tasks, reports, or after the end
                time.sleep(rng.uniform(0.0, 1.0))
            else:  # inside the tasks: just after one more task is saved
                run_helpers.wait_until(proc, lambda n=before: len(run_helpers.task_files(out)) > n)
                time.sleep(rng.uniform(0.0, 0.05))
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        saved.append(_assert_whole(out, n_tasks))
    return saved


@pytest.mark.slow
def test_compare_killed_ten_times_resumes_to_the_same_results(tmp_path, references, forks):
    out, log = tmp_path / "run", tmp_path / "run.err"
    saved = _kill_loop(forks, COMPARE, out, log, COMPARE_TASKS, kills=10, seed=20240611)
    assert any(0 < n < COMPARE_TASKS for n in saved), saved  # some kills landed mid-run
    assert _finish(COMPARE, out, log, start=forks) == 0, log.read_text()
    assert _assert_whole(out, COMPARE_TASKS) == COMPARE_TASKS
    assert not [p for p in out.rglob("*.tmp")]  # the last run's lock removed the leftovers
    ref = references("compare")
    assert_frame_equal(_scores(out), _scores(ref), check_exact=True)
    assert_frame_equal(pd.read_csv(out / "ttests.csv"), pd.read_csv(ref / "ttests.csv"), check_exact=True)


@pytest.mark.slow
def test_classify_killed_resumes_to_the_same_results(tmp_path, references, forks):
    out, log = tmp_path / "run", tmp_path / "run.err"
    _kill_loop(forks, CLASSIFY, out, log, CLASSIFY_TASKS, kills=3, seed=7)
    assert _finish(CLASSIFY, out, log, start=forks) == 0, log.read_text()
    assert _assert_whole(out, CLASSIFY_TASKS) == CLASSIFY_TASKS
    assert_frame_equal(_scores(out), _scores(references("classify")), check_exact=True)


def test_a_second_run_on_the_same_out_is_refused_with_one_line(tmp_path, forks):
    out, log = tmp_path / "run", tmp_path / "run.err"
    out.mkdir()
    with locked_directory(out):  # this process holds it, as a running ldhmm would
        assert (out / LOCK_NAME).read_text().startswith(f"{os.getpid()}\n")
        proc = forks(COMPARE, out, log)
        assert proc.wait(STARTUP_TIMEOUT) == 1
        line = _one_line(log)
        assert line.startswith("ldhmm compare: error: ")
        assert f"is in use by another ldhmm run (pid {os.getpid()}: " in line
        assert "use another --out" in line
        assert not (out / "config.json").exists()  # refused before writing anything
    assert (out / LOCK_NAME).read_text() == ""  # released: emptied, no stale pid
    proc = forks(COMPARE, out, log)  # now it starts normally
    try:
        assert run_helpers.wait_until(proc, _holds_lock(proc, out)), log.read_text()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_ctrl_c_ends_the_run_with_one_line_and_it_resumes(tmp_path, references, forks):
    out = tmp_path / "run"
    total = COMPARE_TASKS
    # 1. --jobs 2, Ctrl-C in a terminal: SIGINT to the whole process group, workers included
    log = tmp_path / "jobs2.err"
    args2 = [*COMPARE, "--jobs", "2"]
    proc = forks(args2, out, log, new_session=True)
    try:
        assert run_helpers.wait_until(proc, lambda: len(run_helpers.task_files(out)) > 0), log.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 130, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    line = _one_line(log)  # no traceback from the workers either
    assert line.startswith("ldhmm compare: interrupted; ")
    assert f"of {total} tasks are saved in {out}: run the same command again to resume (" in line
    assert line.endswith(f"--jobs 2 --out {out}") and " -m ldhmm.cli compare --dataset synthetic " in line
    deadline = time.monotonic() + 10
    while run_helpers.session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not run_helpers.session_processes(proc.pid)  # the workers are gone
    _assert_whole(out, total)
    # 2. --jobs 1, SIGINT to the process just after a task is saved
    log = tmp_path / "jobs1.err"
    before = len(run_helpers.task_files(out))
    proc = forks(COMPARE, out, log)
    try:
        run_helpers.wait_until(proc, lambda: len(run_helpers.task_files(out)) > before)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    line = _one_line(log)
    saved = _assert_whole(out, total)
    assert f"ldhmm compare: interrupted; {saved} of {total} tasks are saved in {out}" in line
    assert "resume" in line
    # 3. the same command again finishes with the uninterrupted run's numbers
    assert _finish(COMPARE, out, log, start=forks) == 0, log.read_text()
    assert_frame_equal(_scores(out), _scores(references("compare")), check_exact=True)


# ------------------------------------------------------------------ in-process units
def _flock_is_free(out: Path) -> bool:
    """Whether a new open file description of ``out/.lock`` gets the flock (as another
    process would: flock locks belong to the open file, not the process)."""
    fd = os.open(out / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_lock_is_reentrant_in_a_process_and_released_by_the_last_hold(tmp_path):
    out = tmp_path / "out"
    digest = prepare_out_dir(out, "unit", {"a": 1})  # outside an experiment function: kept
    assert (out / LOCK_NAME).read_text().startswith(f"{os.getpid()}\n")
    with locked_directory(out):  # re-entered, not refused
        assert digest == prepare_out_dir(out, "unit", {"a": 1})
        release_out_dir(out)
        assert not _flock_is_free(out)
    assert not _flock_is_free(out)  # prepare_out_dir's first hold
    release_out_dir(out)
    assert _flock_is_free(out)
    assert (out / LOCK_NAME).read_text() == ""  # no stale pid


def test_experiment_functions_release_the_lock_when_they_end(tmp_path):
    from ldhmm.experiments.tasks import holds_out_dir_lock

    @holds_out_dir_lock
    def experiment(out, fail):
        prepare_out_dir(out, "unit", {"a": 1})
        assert not _flock_is_free(out)
        if fail:
            raise RuntimeError("boom")

    out = tmp_path / "out"
    experiment(out, False)
    assert _flock_is_free(out)
    with pytest.raises(RuntimeError):
        experiment(out, True)
    assert _flock_is_free(out)


def test_lock_message_names_the_holder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242\nldhmm compare --out x\n")
        # flock locks belong to the open file: a second open in this process conflicts too
        with pytest.raises(OutputLockedError, match=r"in use by another ldhmm run \(pid 4242: ldhmm compare"):
            prepare_out_dir(out, "unit", {"a": 1})
        assert not (out / "config.json").exists()
    finally:
        os.close(fd)


def test_atomic_writers_match_the_plain_ones_and_stale_temporaries_go(tmp_path):
    from matplotlib.figure import Figure

    df = pd.DataFrame({"a": [1.0, float("nan"), 1 / 3], "b": ["x", "y,z", 'q"']})
    df.to_csv(tmp_path / "plain.csv", index=False)
    atomic_write_csv(df, tmp_path / "atomic.csv")
    assert (tmp_path / "plain.csv").read_bytes() == (tmp_path / "atomic.csv").read_bytes()
    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [1, 0])
    fig.savefig(tmp_path / "plain.png", dpi=50)
    atomic_savefig(fig, tmp_path / "atomic.png", dpi=50)
    assert (tmp_path / "plain.png").read_bytes() == (tmp_path / "atomic.png").read_bytes()
    assert (tmp_path / "plain.csv").stat().st_mode == (tmp_path / "atomic.csv").stat().st_mode
    assert not list(tmp_path.glob(".*"))
    out = tmp_path / "out"
    (out / "tasks").mkdir(parents=True)
    stale = [out / ".folds.csv.abc123_x.tmp", out / "tasks" / ".M__K2__fold0.json.q1w2e3r4.tmp"]
    keep = out / "tasks" / "notes.tmp"
    for p in [*stale, keep]:
        p.write_text("{trunc")
    prepare_out_dir(out, "unit", {"a": 1})
    release_out_dir(out)
    assert not any(p.exists() for p in stale) and keep.exists()


class _Boom(Exception):
    pass


@pytest.mark.parametrize("error", [_Boom, KeyboardInterrupt])
@pytest.mark.parametrize("binary", [False, True])
def test_write_atomically_leaves_the_old_file_on_an_exception(tmp_path, error, binary):
    target = tmp_path / "model.json"
    target.write_text("old")

    def write(f):
        f.write(b"new, half" if binary else "new, half")
        raise error("while writing")

    with pytest.raises(error):
        write_atomically(target, write, binary=binary)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["model.json"]  # no temporary
    write_atomically(target, lambda f: f.write(b"new" if binary else "new"), binary=binary)
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["model.json"]


def test_write_atomically_names_permissions_and_directories(tmp_path):
    seen = []

    def write(f):
        seen.extend(n for n in os.listdir(tmp_path) if n != "plain.csv")  # the temporary file
        f.write("x")

    write_atomically(tmp_path / "a.csv", write)
    assert len(seen) == 1 and TEMPORARY_NAME.match(seen[0]) and seen[0].startswith(".a.csv.")
    (tmp_path / "plain.csv").write_text("x")
    assert (tmp_path / "a.csv").stat().st_mode == (tmp_path / "plain.csv").stat().st_mode
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_atomically(tmp_path / "no" / "b.csv", write)
    assert not (tmp_path / "no").exists()
    write_atomically(tmp_path / "no" / "b.csv", write, parents=True)
    assert (tmp_path / "no" / "b.csv").read_text() == "x"


def test_interrupted_line_names_what_is_saved_and_the_command_to_resume(tmp_path, monkeypatch):
    from ldhmm.cli.running import interrupted_line
    from ldhmm.experiments.tasks import RunInterrupted

    monkeypatch.chdir(tmp_path)
    for var in [k for k in os.environ if k.startswith("LDHMM_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("LDHMM_DATA", "/data dir")
    err = RunInterrupted(Path("results/x"), 3, 18)
    argv = ["compare", "--dataset", "synthetic", "--out", "results/x y"]
    again = f"cd {tmp_path} && LDHMM_DATA='/data dir' ldhmm compare --dataset synthetic --out 'results/x y'"
    assert interrupted_line("ldhmm compare", err, argv, explicit=True) == (
        "ldhmm compare: interrupted; 3 of 18 tasks are saved in results/x: run the same command "
        f"again to resume (results/x/command.sh): {again}"
    )
    assert (tmp_path / "results" / "x" / "command.sh").read_text().splitlines()[-1] == again
    assert isinstance(err, KeyboardInterrupt)
    line = interrupted_line("ldhmm compare", KeyboardInterrupt(), ["compare", "--out", "a\nb"], True)
    assert (
        line == "ldhmm compare: interrupted; finished tasks are saved: run the same command again to resume"
    )
    assert interrupted_line("ldhmm fit", KeyboardInterrupt(), ["fit", "x"], True) == "ldhmm fit: interrupted"


def test_without_fcntl_the_module_imports_and_runs_unlocked(tmp_path, monkeypatch):
    import importlib.util

    import ldhmm.data.directory_lock as lock_mod
    import ldhmm.experiments.tasks as tasks_mod

    monkeypatch.setitem(sys.modules, "fcntl", None)  # as on Windows: import fcntl fails
    # a name inside ldhmm.data: the module's relative imports need its package
    name = "ldhmm.data.directory_lock_without_fcntl"
    spec = importlib.util.spec_from_file_location(name, lock_mod.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.fcntl is None
    monkeypatch.setattr(tasks_mod, "acquire", module.acquire)
    out = tmp_path / "out"
    tasks_mod.prepare_out_dir(out, "unit", {"a": 1})
    assert not (out / LOCK_NAME).exists()
    tasks_mod.release_out_dir(out)
    with module.locked_directory(out):
        pass


SIGMASK_PROBE = """
import multiprocessing as mp, signal
from concurrent.futures import ProcessPoolExecutor
from ldhmm.experiments.tasks import _sigint_blocked
with _sigint_blocked():
    pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
    worker_mask = pool.submit(signal.pthread_sigmask, signal.SIG_BLOCK, []).result(60)
    parent = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
pool.shutdown()
print(parent, signal.SIGINT in worker_mask)
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks")
def test_workers_start_with_sigint_blocked_in_a_fresh_process():
    """The first pool of a process starts multiprocessing's resource tracker, which unblocks
    SIGINT in the calling thread: every worker spawned after it must still start with SIGINT
    blocked (a fresh interpreter, so that the tracker is not already running)."""
    done = subprocess.run([sys.executable, "-c", SIGMASK_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path):
    from ldhmm.experiments.tasks import OutputLockedError, prepare_out_dir

    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").symlink_to(target)
    with pytest.raises(OutputLockedError, match="symbolic link"):
        prepare_out_dir(out, "compare", {"experiment": "x"})
    assert target.read_text() == "keep me\n"

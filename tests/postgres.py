"""A throwaway PostgreSQL server for the archive's contract tests.

Started with ``initdb`` and ``pg_ctl`` (found on PATH or under
``/usr/lib/postgresql/*/bin``) in a temp dir, on a free port, with fsync off;
as the ``postgres`` user when the tests run as root (PostgreSQL refuses root).
:func:`unavailable` says why no server can be started, for a skip reason.
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "evo"


def binaries() -> Path | None:
    candidates = [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    if shutil.which("pg_ctl"):
        candidates.insert(0, Path(shutil.which("pg_ctl")).resolve().parent)
    return next((d for d in candidates if (d / "initdb").exists() and (d / "pg_ctl").exists()), None)


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


def unavailable() -> str | None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install -e '.[postgres]')"
    if binaries() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql"
    if os.geteuid() == 0 and _run_as() is None:
        return "running as root and there is no postgres user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self):
        self.bin = binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="evo-pg-"))
        self.port = _free_port()
        self._names = itertools.count()
        user = _run_as()
        if user is not None:
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._preexec = None if user is None else (lambda: (os.setgid(user.pw_gid), os.setuid(user.pw_uid)))
        self._pg("initdb", "-D", self.dir / "data", "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync")
        self._pg("pg_ctl", "-D", self.dir / "data", "-l", self.dir / "log", "-w", "-t", "60", "-o",
                 f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                 "-c synchronous_commit=off -c full_page_writes=off", "start")

    def _pg(self, program: str, *args) -> None:
        done = subprocess.run([str(self.bin / program), *map(str, args)], capture_output=True, text=True,
                              timeout=120, preexec_fn=self._preexec, cwd=self.dir)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"t{next(self._names)}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._pg("pg_ctl", "-D", self.dir / "data", "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

"""A private PostgreSQL cluster for the tests: initdb in a temporary directory, the
server started with pg_ctl on a free loopback port and stopped by its PID.

    server = PgServer(tmpdir)
    server.start()                      # initdb on first start, then pg_ctl start
    url = server.create_db("t1")        # postgresql://postgres@127.0.0.1:PORT/t1
    server.query(url, "SELECT 1")       # [(1,)]
    server.stop(); server.start()       # an outage: same port, same data
    server.close()                      # stops it (by PID) and removes what it made

Run as root, the cluster belongs to the user `postgres` (initdb and the server refuse
to run as root): commands go through runuser and the data directory is chowned. Trust
authentication on loopback only. fsync is off by default (tests need no durability
across a power cut, and it spares the shared disk); settings= overrides any setting.
The binaries are /usr/lib/postgresql/15/bin (Debian 12's postgresql), or
TALLY_PG_BIN. env= adds variables to the server's environment (a fake clock's)."""
import os
import pathlib
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time

PG_BIN = pathlib.Path(os.environ.get("TALLY_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "postgres"
STOP_TIMEOUT = 30

_DEFAULT_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "64MB",
}


def _reachable(path, uid):
    """True when user uid can reach path (every directory above it searchable)."""
    p = pathlib.Path(path).resolve()
    for d in [p, *p.parents]:
        st = d.stat()
        mode = st.st_mode
        if st.st_uid == uid:
            ok = mode & stat.S_IXUSR
        else:
            ok = mode & stat.S_IXOTH
        if not ok:
            return False
    return True


class PgServer:
    def __init__(self, tmpdir, settings=None, env=None):
        self.settings = dict(_DEFAULT_SETTINGS, **(settings or {}))
        self.env = dict(os.environ, **env) if env else None
        self.port = None
        self.pid = None
        self._as_root = os.geteuid() == 0
        self._owned = None          # a directory made outside tmpdir, removed by close()
        base = pathlib.Path(tmpdir)
        base.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            pw = pwd.getpwnam(PG_USER)
            self._uid, self._gid = pw.pw_uid, pw.pw_gid
            # pytest's own temporary directories are 0700 root: the server could not
            # reach a data directory there.
            if not _reachable(base.parent, self._uid):
                base = pathlib.Path(tempfile.mkdtemp(prefix="tally-pg-"))
                self._owned = base
            os.chown(base, self._uid, self._gid)
        self.dir = base
        self.data = base / "data"
        self.sockets = base / "sock"
        self.log = base / "postgres.log"

    # -- running commands as the cluster's owner

    def _run(self, argv, **kw):
        if self._as_root:
            argv = ["runuser", "-u", PG_USER, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, **kw)

    def _initdb(self):
        self.sockets.mkdir(exist_ok=True)
        if self._as_root:
            os.chown(self.sockets, self._uid, self._gid)
        proc = self._run([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", PG_USER,
                          "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                         timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"initdb failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def start(self):
        """Starts the server (initdb first if the data directory does not exist yet),
        on the port of the previous start if there was one. Raises on failure."""
        if self.pid is not None:
            return
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        if self.port is None:
            from conftest import free_port
            self.port = free_port()
        opts = [f"-p {self.port}", "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.sockets}"]
        opts += [f"-c {k}={v}" for k, v in self.settings.items()]
        if self._as_root and not self.log.exists():
            self.log.touch()
            os.chown(self.log, self._uid, self._gid)
        proc = self._run([str(PG_BIN / "pg_ctl"), "start", "-D", str(self.data), "-w",
                          "-t", "60", "-l", str(self.log), "-o", " ".join(opts)],
                         timeout=90)
        pidfile = self.data / "postmaster.pid"
        if proc.returncode != 0 or not pidfile.exists():
            log = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed ({proc.returncode}):\n{proc.stdout}\n"
                               f"{proc.stderr}\n--- {self.log} ---\n{log}")
        self.pid = int(pidfile.read_text().split("\n", 1)[0])

    def stop(self):
        """Stops the server by its PID (a fast shutdown: SIGINT, SIGQUIT if it lingers),
        keeping the data for another start()."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        for sig, wait in ((signal.SIGINT, STOP_TIMEOUT), (signal.SIGQUIT, 10),
                          (signal.SIGKILL, 10)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not _alive(pid):
                    return
                time.sleep(0.05)
        raise RuntimeError(f"postgres {pid} did not stop")

    def close(self):
        """Stops the server and removes the directory it made outside tmpdir."""
        try:
            self.stop()
        finally:
            if self._owned is not None:
                shutil.rmtree(self._owned, ignore_errors=True)
                self._owned = None

    # -- clients

    def url(self, dbname="postgres"):
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{dbname}"

    def create_db(self, name):
        """Creates the empty database name and returns its URL."""
        self.query(self.url("postgres"), f'CREATE DATABASE "{name}"')
        return self.url(name)

    def query(self, url, sql, params=()):
        """Runs sql (autocommit) and returns its rows as tuples ([] for none)."""
        import psycopg2
        conn = psycopg2.connect(url)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql, params or None)
                return cur.fetchall() if cur.description is not None else []
        finally:
            conn.close()


def _alive(pid):
    """True while pid exists and is not a zombie (the server is not our child when
    pg_ctl started it, so nobody here reaps it; a zombie has stopped all the same)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False

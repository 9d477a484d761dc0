"""Integration tests for tallyctl, the operator CLI: every command against a fresh
database, the stored key hash against Python's own HMAC, and the exit status contract
(0 success, 1 runtime failure, 2 usage error).

Every test of what the store holds runs twice: on a SQLite file in tmp_path and on a
fresh database of the private PostgreSQL server (tests/pgserver.py), with the same
expected output. Help, the files beside a SQLite database and its migrations are
tested on SQLite alone (SQLITE_ONLY).

The binary is $TALLY_BUILD/tallyctl (TALLY_BUILD defaults to "build", relative to the
repository root). With TALLY_VALGRIND=1 every run goes through valgrind memcheck."""

import base64
import calendar
import hashlib
import hmac
import json
import os
import re
import sqlite3
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TALLY_BUILD", "build"))
TALLYCTL = (BUILD if BUILD.is_absolute() else ROOT / BUILD) / "tallyctl"
VALGRIND = ["valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
            "--errors-for-leak-kinds=definite"] if os.environ.get("TALLY_VALGRIND") else []
KEY_RE = re.compile(r"tly_[A-Za-z0-9_-]{43}")
COMMANDS = ["key create", "key set", "key list", "key revoke",
            "team create", "team set", "team list", "team delete", "tag set", "tag list",
            "tag delete", "model set", "model list",
            "prices set", "prices list", "prices delete", "prices import",
            "provider set", "provider list"]


def run(args, env_extra=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("TALLY_DB", "TALLY_SECRET_FILE")}
    env.update(env_extra or {})
    return subprocess.run(VALGRIND + [str(TALLYCTL)] + list(args), capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


WARNING = "tallyctl: warning: "


class Ctl:
    """tallyctl bound to one store: a SQLite database in a temporary directory or, given
    the PostgreSQL server pg, its database at url (the secret file then in the
    directory, as --secret: a URL has no path to put it beside)."""

    def __init__(self, tmp_path, pg=None, url=None):
        self.dir = tmp_path
        self.pg, self.url = pg, url
        self.db = url if pg else tmp_path / "tally.db"
        self.secret = tmp_path / ("tally.secret" if pg else "tally.db.secret")

    def __call__(self, *args):
        store = ["--db", str(self.db)] + (["--secret", str(self.secret)] if self.pg else [])
        return run(store + list(args))

    def sibling(self, name):
        """Another fresh store of the same kind."""
        d = self.dir / name
        d.mkdir()
        return Ctl(d, self.pg, self.pg.create_db(f"{self.url.rsplit('/', 1)[1]}_{name}")
                   if self.pg else None)

    def exists(self):
        if self.pg:
            return self.pg.query(self.url, "SELECT to_regclass('meta')") != [(None,)]
        return self.db.exists()

    def ok(self, *args):
        r = self(*args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        # A card that leaves classes unpriced is written with a warning (tested apart).
        assert all(line.startswith(WARNING) for line in r.stderr.splitlines()), r.stderr
        return r.stdout

    def json(self, *args):
        return json.loads(self.ok(*args, "--json"))

    def query(self, sql, params=()):
        """Rows of sql, written for SQLite (? parameters), committed; BYTEA comes back as
        bytes."""
        if self.pg:
            rows = self.pg.query(self.url, sql.replace("?", "%s"), params)
            return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)
                    for r in rows]
        con = sqlite3.connect(self.db)
        try:
            with con:   # commits a change
                return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def generation(self):
        return int(self.query("SELECT value FROM meta WHERE name = 'config_generation'")[0][0])


SQLITE_ONLY = {"test_help_lists_every_command", "test_command_help", "test_group_help",
               "test_first_command_creates_database", "test_newer_database_refused",
               "test_clear_key_stored_nowhere", "test_key_policy_help"}


def pytest_generate_tests(metafunc):
    if "store" in metafunc.fixturenames:
        metafunc.parametrize("store", ["sqlite"] if metafunc.function.__name__ in SQLITE_ONLY
                             else ["sqlite", "pg"])


@pytest.fixture
def ctl(store, tmp_path, request):
    assert TALLYCTL.exists(), f"build {TALLYCTL} first"
    if store == "pg":
        return Ctl(tmp_path, request.getfixturevalue("pg_server"),
                   request.getfixturevalue("pg_url"))
    return Ctl(tmp_path)


@pytest.fixture
def seeded(ctl):
    """A database with two providers and three models."""
    ctl.ok("provider", "set", "openai", "--api", "openai", "--backend", "be_openai",
           "--url", "https://api.openai.com")
    ctl.ok("provider", "set", "anthropic", "--api", "anthropic", "--backend", "be_anthropic")
    ctl.ok("model", "set", "gpt-4o", "--provider", "openai", "--input-micros", "2500000",
           "--output-micros", "10000000", "--cached-micros", "1250000")
    ctl.ok("model", "set", "gpt-4o-mini", "--provider", "openai")
    ctl.ok("model", "set", "claude-sonnet-4", "--provider", "anthropic",
           "--input-micros", "3000000", "--output-micros", "15000000")
    return ctl


PRICE_COLUMNS = ["input_micros_per_mtok", "cached_micros_per_mtok", "cache_write_micros_per_mtok",
                 "cache_write_1h_micros_per_mtok", "output_micros_per_mtok",
                 "reasoning_micros_per_mtok", "audio_input_micros_per_mtok",
                 "audio_output_micros_per_mtok", "web_search_micros_per_call"]
CARD_SQL = ("SELECT c.tier, c.above_tokens, " + ", ".join("c." + col for col in PRICE_COLUMNS) +
            " FROM model_prices c JOIN models m ON m.id = c.model_id")


def cards(ctl, model):
    """{(tier, above_tokens): {column: price}} of model, read from the database."""
    rows = ctl.query(CARD_SQL + " WHERE m.name = ?", (model,))
    return {(r[0], r[1]): dict(zip(PRICE_COLUMNS, r[2:])) for r in rows}


def card(**prices):
    """A card's prices: the ones given, every other one NULL."""
    assert set(prices) <= set(PRICE_COLUMNS), prices
    return {col: prices.get(col) for col in PRICE_COLUMNS}


def create_key(ctl, name, *extra):
    out = ctl.ok("key", "create", "--name", name, *extra)
    assert KEY_RE.fullmatch(out.rstrip("\n")), out
    assert out.count("\n") == 1 and out.endswith("\n")
    return out.rstrip("\n")


# ---- help ----

def test_help_lists_every_command(ctl):
    out = ctl.ok("--help")
    for cmd in COMMANDS:
        assert f"tallyctl [OPTIONS] {cmd}" in out
    for opt in ("--db", "--secret", "TALLY_DB", "TALLY_SECRET_FILE", "Exit status"):
        assert opt in out
    assert not ctl.db.exists(), "help must not touch the database"


@pytest.mark.parametrize("cmd", COMMANDS)
def test_command_help(ctl, cmd):
    out = ctl.ok(*cmd.split(), "--help")
    assert out.startswith(f"usage: tallyctl [OPTIONS] {cmd}")
    assert ctl.ok(*cmd.split(), "-h") == out


@pytest.mark.parametrize("group", ["key", "team", "tag", "model", "prices", "provider"])
def test_group_help(ctl, group):
    out = ctl.ok(group, "--help")
    for cmd in COMMANDS:
        assert (f"tallyctl [OPTIONS] {cmd}" in out) == cmd.startswith(group + " ")


# ---- database creation and location ----

def test_first_command_creates_database(ctl):
    out = ctl.ok("provider", "list")
    assert out.split() == ["ID", "NAME", "API", "BACKEND", "URL", "CREATED"]
    assert ctl.query("PRAGMA user_version") == [(SCHEMA,)]
    assert ctl.query("PRAGMA journal_mode") == [("wal",)]
    assert ctl.generation() == 0
    assert not ctl.secret.exists(), "only key creation needs the secret"
    assert ctl.json("key", "list") == []


def test_env_and_flag_locations(tmp_path):
    db = tmp_path / "env.db"
    secret = tmp_path / "elsewhere.secret"
    r = run(["key", "create", "--name", "k"],
            {"TALLY_DB": str(db), "TALLY_SECRET_FILE": str(secret)})
    assert r.returncode == 0, r.stderr
    assert db.exists() and secret.exists()
    assert not (tmp_path / "env.db.secret").exists()

    flagged = tmp_path / "flag.secret"
    r = run(["--db", str(db), "--secret", str(flagged), "key", "create", "--name", "k2"])
    assert r.returncode == 0, r.stderr
    assert flagged.exists()

    (tmp_path / "data").mkdir()
    r = run(["key", "list"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "data" / "tally.db").exists()


def test_newer_database_refused(ctl):
    ctl.ok("key", "list")
    con = sqlite3.connect(ctl.db)
    con.execute("PRAGMA user_version = 99")
    con.close()
    r = ctl("key", "list")
    assert r.returncode == 1
    assert "newer than this binary" in r.stderr


def test_unopenable_database(tmp_path):
    r = run(["--db", str(tmp_path / "no" / "such" / "dir.db"), "key", "list"])
    assert r.returncode == 1
    assert "dir.db" in r.stderr


# ---- providers ----

def test_provider_set_and_list(ctl):
    assert ctl.ok("provider", "set", "openai", "--api", "openai", "--backend", "be_openai",
                  "--url", "https://api.openai.com/v1") == "created provider openai\n"
    assert ctl.ok("provider", "set", "local", "--api=openai", "--backend=be_vllm") == \
        "created provider local\n"
    rows = {p["name"]: p for p in ctl.json("provider", "list")}
    assert set(rows) == {"openai", "local"}
    assert rows["openai"]["api"] == "openai"
    assert rows["openai"]["backend"] == "be_openai"
    assert rows["openai"]["base_url"] == "https://api.openai.com/v1"
    assert rows["local"]["base_url"] is None
    assert isinstance(rows["openai"]["created_at"], int)

    # Update: api and backend replaced, URL kept when absent and cleared by ''.
    assert ctl.ok("provider", "set", "openai", "--api", "anthropic", "--backend", "be2") == \
        "updated provider openai\n"
    row = {p["name"]: p for p in ctl.json("provider", "list")}["openai"]
    assert (row["api"], row["backend"], row["base_url"]) == \
        ("anthropic", "be2", "https://api.openai.com/v1")
    assert row["id"] == rows["openai"]["id"]
    ctl.ok("provider", "set", "openai", "--api", "openai", "--backend", "be2", "--url", "")
    assert {p["name"]: p for p in ctl.json("provider", "list")}["openai"]["base_url"] is None

    text = ctl.ok("provider", "list").splitlines()
    assert text[0].split() == ["ID", "NAME", "API", "BACKEND", "URL", "CREATED"]
    assert [line.split()[1] for line in text[1:]] == ["local", "openai"]
    assert ctl.query("SELECT count(*) FROM providers") == [(2,)]


# ---- models ----

def test_model_set_and_list(seeded):
    models = {m["name"]: m for m in seeded.json("model", "list")}
    assert set(models) == {"gpt-4o", "gpt-4o-mini", "claude-sonnet-4"}
    m = models["gpt-4o"]
    assert m["provider"] == "openai"
    assert (m["input_micros_per_mtok"], m["output_micros_per_mtok"],
            m["cached_micros_per_mtok"]) == (2500000, 10000000, 1250000)
    # Prices not given are unknown, never 0.
    mini = models["gpt-4o-mini"]
    assert (mini["input_micros_per_mtok"], mini["output_micros_per_mtok"],
            mini["cached_micros_per_mtok"], mini["cache_write_micros_per_mtok"]) == \
        (None, None, None, None)
    assert m["cache_write_micros_per_mtok"] is None

    # A partial update changes only what it names.
    assert seeded.ok("model", "set", "gpt-4o", "--provider", "openai",
                     "--output-micros", "8000000") == "updated model gpt-4o\n"
    m = {m["name"]: m for m in seeded.json("model", "list")}["gpt-4o"]
    assert (m["input_micros_per_mtok"], m["output_micros_per_mtok"],
            m["cached_micros_per_mtok"]) == (2500000, 8000000, 1250000)

    # Moving a model to another provider.
    seeded.ok("model", "set", "gpt-4o-mini", "--provider", "anthropic")
    assert {m["name"]: m for m in seeded.json("model", "list")}["gpt-4o-mini"]["provider"] == \
        "anthropic"

    # Names as self-hosted fleets spell them, and the largest price.
    seeded.ok("model", "set", "meta-llama/Llama-3.1-8B-Instruct", "--provider", "openai",
              "--input-micros", "1000000000000")
    seeded.ok("model", "set", "llama3.1:8b", "--provider", "openai")
    text = seeded.ok("model", "list").splitlines()
    assert text[0].split() == ["ID", "NAME", "PROVIDER", "INPUT_MICROS", "OUTPUT_MICROS",
                               "CACHED_MICROS", "CACHE_WRITE_MICROS", "CARDS", "CREATED",
                               "UPDATED"]
    assert any(line.split()[1] == "meta-llama/Llama-3.1-8B-Instruct" and
               line.split()[3:7] == ["1000000000000", "-", "-", "-"] for line in text[1:])


def test_model_prices_unset_and_cache_write(seeded):
    seeded.ok("model", "set", "claude-sonnet-4", "--provider", "anthropic",
              "--cache-write-micros", "3750000", "--cached-micros", "300000")
    m = {m["name"]: m for m in seeded.json("model", "list")}["claude-sonnet-4"]
    assert (m["input_micros_per_mtok"], m["output_micros_per_mtok"],
            m["cached_micros_per_mtok"], m["cache_write_micros_per_mtok"]) == \
        (3000000, 15000000, 300000, 3750000)
    # A new model with one price: the others stay unknown; 0 is a real price.
    seeded.ok("model", "set", "free", "--provider", "openai", "--input-micros", "0")
    assert seeded.query(CARD_SQL + " WHERE m.name = 'free'") == \
        [("default", 0, 0, None, None, None, None, None, None, None, None)]
    line = [row for row in seeded.ok("model", "list").splitlines()[1:]
            if row.split()[1] == "free"][0]
    assert line.split()[3:7] == ["0", "-", "-", "-"]


def test_model_unknown_provider(seeded):
    r = seeded("model", "set", "x", "--provider", "nosuch")
    assert r.returncode == 1
    assert "nosuch" in r.stderr
    assert seeded.query("SELECT count(*) FROM models WHERE name = 'x'") == [(0,)]


# ---- migration ----

SCHEMA_V1 = Path(__file__).with_name("schema_v1.sql")


def normalized_schema(db):
    """Every table, index and trigger as (type, name, SQL without comments, quotes or
    layout), so that a migrated database compares equal to a fresh one."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT type, name, sql FROM sqlite_master"
                           " WHERE sql IS NOT NULL ORDER BY type, name").fetchall()
    finally:
        con.close()
    out = []
    for kind, name, sql in rows:
        sql = re.sub(r"--[^\n]*", "", sql).replace('"', "")
        sql = re.sub(r"\s+", " ", sql)
        sql = re.sub(r"\s*([(),;])\s*", r"\1", sql).strip()
        out.append((kind, name, sql))
    return out


def test_migrate_v1_database(tmp_path):
    ctl = Ctl(tmp_path)
    con = sqlite3.connect(ctl.db)
    con.executescript(SCHEMA_V1.read_text())
    con.executescript("""
        INSERT INTO providers (id, name, api, backend, base_url, created_at) VALUES
          (1, 'openai', 'openai', 'be_openai', 'https://api.openai.com', 100),
          (2, 'vllm', 'openai', 'be_vllm', NULL, 101);
        INSERT INTO models (id, name, provider_id, input_micros_per_mtok, output_micros_per_mtok,
                            cached_micros_per_mtok, created_at, updated_at) VALUES
          (1, 'gpt-4o', 1, 2500000, 10000000, 1250000, 102, 103),
          (5, 'llama3.1:8b', 2, 0, 0, 0, 104, 104),
          (7, 'half-free', 1, 0, 500, 0, 105, 106);
        INSERT INTO keys (id, name, prefix, hash, default_model, created_at, revoked_at) VALUES
          (1, 'ci', 'tly_aaaaaaaa', zeroblob(32), 'gpt-4o', 107, NULL),
          (3, 'old', 'tly_bbbbbbbb', randomblob(32), NULL, 108, 109);
        INSERT INTO key_models (key_id, model) VALUES (1, 'gpt-4o'), (1, 'llama3.1:8b');
    """)
    con.close()
    kept = ["SELECT * FROM providers ORDER BY id",
            "SELECT id, name, prefix, hash, default_model, created_at, revoked_at FROM keys"
            " ORDER BY id",
            "SELECT * FROM key_models ORDER BY key_id, model",
            "SELECT * FROM meta ORDER BY name"]
    before = [ctl.query(sql) for sql in kept]
    assert ctl.query("PRAGMA user_version") == [(1,)]

    models = ctl.json("model", "list")   # opening migrates
    assert ctl.query("PRAGMA user_version") == [(SCHEMA,)]
    # Keys come through without limits.
    assert ctl.query("SELECT rpm, tpm, max_concurrent, budget_micros, budget_period FROM keys") \
        == [(None, None, None, None, "month")] * 2
    assert [ctl.query(sql) for sql in kept] == before
    # Version 7 moved the prices to each model's default card, a cache write priced at
    # the input price as it used to be charged.
    assert ctl.query("SELECT m.id, m.name, m.provider_id, c.input_micros_per_mtok,"
                     " c.output_micros_per_mtok, c.cached_micros_per_mtok,"
                     " c.cache_write_micros_per_mtok, m.created_at, m.updated_at"
                     " FROM models m LEFT JOIN model_prices c ON c.model_id = m.id"
                     "  AND c.tier = 'default' AND c.above_tokens = 0 ORDER BY m.id") == [
        (1, "gpt-4o", 1, 2500000, 10000000, 1250000, 2500000, 102, 103),
        # v1 stored unset prices as 0: all three 0 means never priced, no card.
        (5, "llama3.1:8b", 2, None, None, None, None, 104, 104),
        # One real price: the zeros are prices too.
        (7, "half-free", 1, 0, 500, 0, 0, 105, 106)]
    assert ctl.query("SELECT count(*) FROM model_prices") == [(2,)]
    assert [m["name"] for m in models] == ["gpt-4o", "half-free", "llama3.1:8b"]
    assert ctl.query("SELECT received, written, dropped FROM accounting") == [(0, 0, 0)]
    assert ctl.query("SELECT count(*) FROM requests") == [(0,)]

    # The same schema as a database created at the current version, triggers and indexes included.
    fresh = Ctl(tmp_path / "fresh")
    fresh.dir.mkdir()
    fresh.ok("key", "list")
    assert normalized_schema(ctl.db) == normalized_schema(fresh.db)
    assert ctl.query("PRAGMA foreign_key_check") == []
    assert ctl.query("PRAGMA integrity_check") == [("ok",)]

    # The rebuilt models table still moves config_generation, and still works.
    gen = ctl.generation()
    ctl.ok("model", "set", "llama3.1:8b", "--provider", "vllm")
    assert ctl.generation() == gen + 1
    ctl.ok("model", "set", "llama3.1:8b", "--provider", "vllm", "--input-micros", "1")
    assert ctl.generation() > gen + 1
    assert cards(ctl, "llama3.1:8b") == {("default", 0): card(input_micros_per_mtok=1)}
    r = ctl("model", "set", "x", "--provider", "nosuch")
    assert r.returncode == 1
    con = sqlite3.connect(ctl.db)
    con.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.IntegrityError):
        con.execute("INSERT INTO models (name, provider_id, created_at, updated_at)"
                    " VALUES ('orphan', 99, 1, 1)")
    con.close()


# ---- keys ----

def test_key_create_stores_only_hmac(seeded):
    key = create_key(seeded, "ci-bot")
    secret = seeded.secret.read_bytes()
    assert len(secret) == 32
    assert stat.S_IMODE(seeded.secret.stat().st_mode) == 0o600

    rows = seeded.query("SELECT name, prefix, hash, default_model, revoked_at FROM keys")
    assert len(rows) == 1
    name, prefix, digest, default_model, revoked_at = rows[0]
    assert name == "ci-bot"
    assert prefix == key[:12]
    assert digest == hmac.new(secret, key.encode(), hashlib.sha256).digest()
    assert default_model is None and revoked_at is None
    assert seeded.query("SELECT count(*) FROM key_models") == [(0,)]

    # A second key uses the same secret and differs.
    key2 = create_key(seeded, "other")
    assert key2 != key
    assert seeded.secret.read_bytes() == secret
    assert seeded.query("SELECT hash FROM keys WHERE name = 'other'")[0][0] == \
        hmac.new(secret, key2.encode(), hashlib.sha256).digest()


def test_clear_key_stored_nowhere(seeded):
    keys = [create_key(seeded, f"k{i}") for i in range(3)]
    seeded.ok("key", "revoke", "k1")
    blobs = b"".join(p.read_bytes() for p in seeded.dir.iterdir()
                     if p.name.startswith("tally.db") and p != seeded.secret)
    assert len(blobs) > 0
    for key in keys:
        raw = base64.urlsafe_b64decode(key[4:] + "=")
        assert len(raw) == 32
        assert key.encode() not in blobs
        assert key[12:].encode() not in blobs      # everything after the stored prefix
        assert raw not in blobs


def test_key_list(seeded):
    k1 = create_key(seeded, "alpha", "--models", "gpt-4o,claude-sonnet-4",
                    "--default-model", "gpt-4o")
    k2 = create_key(seeded, "beta")
    seeded.ok("key", "revoke", "beta")

    listed = seeded.json("key", "list")
    assert [k["name"] for k in listed] == ["alpha", "beta"]
    alpha, beta = listed
    assert set(alpha) == {"id", "name", "team", "prefix", "created_at", "revoked_at", "models",
                          "default_model", "service_tiers", "server_tools", "audio",
                          "cache_writes", "end_users", "tags", "rpm", "tpm",
                          "max_concurrent", "budget_micros", "budget_period", "budget_tz"}
    assert alpha["prefix"] == k1[:12] and beta["prefix"] == k2[:12]
    assert alpha["models"] == ["claude-sonnet-4", "gpt-4o"]
    assert alpha["default_model"] == "gpt-4o"
    assert alpha["revoked_at"] is None and alpha["team"] is None
    assert beta["models"] is None and beta["default_model"] is None
    assert isinstance(beta["revoked_at"], int) and beta["revoked_at"] >= beta["created_at"]

    text = seeded.ok("key", "list")
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "NAME", "TEAM", "PREFIX", "CREATED", "REVOKED", "MODELS",
                                "DEFAULT_MODEL", "SERVICE_TIERS", "SERVER_TOOLS", "AUDIO",
                                "CACHE_WRITES", "END_USERS", "TAGS", "RPM", "TPM", "MAX_CONC",
                                "BUDGET_USD", "PERIOD", "TIME_ZONE"]
    assert lines[1].split()[1:4] == ["alpha", "-", k1[:12]]
    assert lines[1].split()[6:8] == ["claude-sonnet-4,gpt-4o", "gpt-4o"]
    assert lines[2].split()[6:8] == ["*", "-"]
    assert lines[1].split()[5] == "-" and lines[2].split()[5] != "-"

    # Neither the keys nor their hashes appear in any listing.
    for digest, in seeded.query("SELECT hash FROM keys"):
        for out in (text, json.dumps(listed)):
            assert digest.hex() not in out
            assert base64.b64encode(digest).decode() not in out
    for key in (k1, k2):
        assert key not in text and key[12:] not in json.dumps(listed)


def test_key_allow_lists(seeded):
    create_key(seeded, "restricted", "--models", "gpt-4o,gpt-4o-mini,gpt-4o")
    rows = seeded.query("SELECT model FROM key_models JOIN keys ON keys.id = key_id"
                        " WHERE keys.name = 'restricted' ORDER BY model")
    assert rows == [("gpt-4o",), ("gpt-4o-mini",)]

    create_key(seeded, "open-default", "--default-model", "claude-sonnet-4")
    assert seeded.query("SELECT default_model FROM keys WHERE name = 'open-default'") == \
        [("claude-sonnet-4",)]
    assert seeded.query("SELECT count(*) FROM key_models JOIN keys ON keys.id = key_id"
                        " WHERE keys.name = 'open-default'") == [(0,)]

    r = seeded("key", "create", "--name", "bad", "--models", "gpt-4o",
               "--default-model", "gpt-4o-mini")
    assert r.returncode == 2 and "not in --models" in r.stderr

    for extra in (["--models", "gpt-4o,nosuch"], ["--default-model", "nosuch"]):
        r = seeded("key", "create", "--name", "bad", *extra)
        assert r.returncode == 1, r.stderr
        assert "unknown model 'nosuch'" in r.stderr
        assert r.stdout == ""
    assert seeded.query("SELECT count(*) FROM keys WHERE name = 'bad'") == [(0,)]


def test_key_names(seeded):
    create_key(seeded, "a" * 64)
    create_key(seeded, "Team_1.prod-bot")
    for bad in ("a" * 65, "", "has space", "slash/name", "ünïcode"):
        r = seeded("key", "create", "--name", bad)
        assert r.returncode == 2, (bad, r.stderr)
        assert "invalid key name" in r.stderr

    r = seeded("key", "create", "--name", "Team_1.prod-bot")
    assert r.returncode == 1 and "already exists" in r.stderr and r.stdout == ""
    assert seeded.query("SELECT count(*) FROM keys") == [(2,)]


def test_key_revoke(seeded):
    create_key(seeded, "victim")
    create_key(seeded, "bystander")
    assert seeded.ok("key", "revoke", "victim") == "revoked key victim\n"
    revoked = dict(seeded.query("SELECT name, revoked_at FROM keys"))
    assert isinstance(revoked["victim"], int) and revoked["bystander"] is None

    r = seeded("key", "revoke", "victim")
    assert r.returncode == 1 and "already revoked" in r.stderr
    assert dict(seeded.query("SELECT name, revoked_at FROM keys"))["victim"] == revoked["victim"]

    r = seeded("key", "revoke", "nobody")
    assert r.returncode == 1 and "no key named 'nobody'" in r.stderr


def test_changes_bump_config_generation(ctl):
    """The agent reloads when config_generation moves: every change must move it."""
    steps = [
        ("provider", "set", "p", "--api", "openai", "--backend", "be"),
        ("provider", "set", "p", "--api", "openai", "--backend", "be2"),
        ("model", "set", "m", "--provider", "p"),
        ("model", "set", "m", "--provider", "p", "--input-micros", "7"),
        ("key", "create", "--name", "k", "--models", "m"),
        ("key", "set", "k", "--rpm", "5"),
        ("key", "set", "k", "--end-users", "required"),
        ("key", "set", "k", "--end-users", "forbidden"),
        ("team", "create", "t"),
        ("team", "create", "u", "--rpm", "5", "--models", "m"),
        ("team", "set", "t", "--rpm", "5"),
        ("team", "set", "t", "--rpm", "none"),
        ("team", "set", "t", "--budget-usd", "1.5", "--budget-period", "total"),
        ("team", "set", "t", "--models", "m"),
        ("team", "set", "t", "--models", "none"),
        ("team", "set", "t", "--members-see-usage", "yes"),
        ("team", "set", "t", "--members-see-usage", "no"),
        ("key", "set", "k", "--team", "t"),
        ("key", "set", "k", "--team", "u"),
        ("key", "set", "k", "--team", "none"),
        ("key", "set", "k", "--tags", "env=prod"),
        ("key", "set", "k", "--tags", ""),
        ("team", "set", "t", "--tags", "owner=search"),
        ("team", "set", "t", "--tags", ""),
        ("tag", "set", "env=prod", "--budget-usd", "5"),
        ("tag", "set", "env=prod", "--budget-usd", "6"),
        ("tag", "set", "env=prod", "--budget-period", "day"),
        ("tag", "delete", "env=prod"),
        ("team", "delete", "t"),
        ("key", "revoke", "k"),
    ]
    last = ctl.generation() if ctl.exists() else 0
    for step in steps:
        ctl.ok(*step)
        now = ctl.generation()
        assert now > last, step
        last = now
    ctl.ok("key", "list")
    ctl.ok("team", "list", "--json")
    ctl.ok("tag", "list")
    assert ctl.generation() == last


def test_secret_file_refused(seeded):
    seeded.secret.write_bytes(b"\0" * 32)
    seeded.secret.chmod(0o644)
    r = seeded("key", "create", "--name", "k")
    assert r.returncode == 1
    assert "group or others" in r.stderr and r.stdout == ""

    seeded.secret.chmod(0o600)
    seeded.secret.write_bytes(b"short")
    r = seeded("key", "create", "--name", "k")
    assert r.returncode == 1 and "5 bytes" in r.stderr
    assert seeded.query("SELECT count(*) FROM keys") == [(0,)]


# ---- key limits ----

LIMITS_SQL = "SELECT rpm, tpm, max_concurrent, budget_micros, budget_period FROM keys WHERE name = ?"


def limits(ctl, name):
    return ctl.query(LIMITS_SQL, (name,))[0]


def test_key_create_with_limits(seeded):
    out = seeded.ok("key", "create", "capped", "--rpm", "60", "--tpm", "100000",
                    "--max-concurrent", "4", "--budget-usd", "25.5", "--budget-period", "day")
    assert KEY_RE.fullmatch(out.rstrip("\n")), out
    assert limits(seeded, "capped") == (60, 100000, 4, 25500000, "day")
    # The --name form takes limits too; limits not given are unset, the period defaults.
    create_key(seeded, "named", "--rpm", "1", "--models", "gpt-4o")
    assert limits(seeded, "named") == (1, None, None, None, "month")
    # Positional name without limits; "none" at creation is the same as absent.
    seeded.ok("key", "create", "plain", "--budget-usd", "none")
    assert limits(seeded, "plain") == (None, None, None, None, "month")


@pytest.mark.parametrize("option, value, index, stored", [
    ("--rpm", "600", 0, 600),
    ("--tpm", "1000000000000", 1, 1000000000000),
    ("--max-concurrent", "1", 2, 1),
    ("--budget-usd", "100", 3, 100000000),
    ("--budget-period", "total", 4, "total"),
])
def test_key_set_each_limit(seeded, option, value, index, stored):
    seeded.ok("key", "create", "k", "--rpm", "5", "--tpm", "50", "--max-concurrent", "2",
              "--budget-usd", "1", "--budget-period", "day")
    seeded.ok("key", "create", "other")
    before = list(limits(seeded, "k"))
    assert seeded.ok("key", "set", "k", option, value) == "updated key k\n"
    before[index] = stored
    assert list(limits(seeded, "k")) == before       # only the given option changed
    assert limits(seeded, "other") == (None, None, None, None, "month")


def test_key_set_none_clears(seeded):
    seeded.ok("key", "create", "k", "--rpm", "5", "--tpm", "50", "--max-concurrent", "2",
              "--budget-usd", "1", "--budget-period", "total")
    seeded.ok("key", "set", "k", "--rpm", "none", "--max-concurrent", "none")
    assert limits(seeded, "k") == (None, 50, None, 1000000, "total")
    seeded.ok("key", "set", "k", "--tpm=none", "--budget-usd", "none")
    assert limits(seeded, "k") == (None, None, None, None, "total")
    # Setting again after clearing.
    seeded.ok("key", "set", "k", "--rpm", "7", "--budget-usd", "0.25")
    assert limits(seeded, "k") == (7, None, None, 250000, "total")


@pytest.mark.parametrize("usd, micros", [
    ("0.000001", 1),
    ("0.000010", 10),
    ("1", 1000000),
    ("12.5", 12500000),
    ("12.50", 12500000),
    ("007.25", 7250000),
    ("0.1", 100000),
    ("0.3", 300000),          # 0.1 + 0.2 != 0.3 in floating point; exact here
    ("19.99", 19990000),
    ("123456.789012", 123456789012),
    ("999999999.999999", 999999999999999),
    ("1000000000", 1000000000000000),
    ("1000000000.000000", 1000000000000000),
])
def test_budget_usd_exact(seeded, usd, micros):
    seeded.ok("key", "create", "k", "--budget-usd", usd)
    assert limits(seeded, "k")[3] == micros
    seeded.ok("key", "set", "k", "--budget-usd", "none")
    seeded.ok("key", "set", "k", "--budget-usd", usd)
    assert limits(seeded, "k")[3] == micros


@pytest.mark.parametrize("usd", [
    "", "-1", "+1", "1e3", "1E3", ".5", "5.", ".", "1.0000001", "0.0000001", "1,5", "1.2.3",
    " 1", "1 ", "0x10", "abc", "NONE", "inf", "nan", "1000000000.000001", "1000000001",
    "99999999999999999999999", "1.99999999999999999999",
    "0", "0.0", "0.000000",   # a budget of nothing: revoke the key instead
])
def test_budget_usd_rejected(seeded, usd):
    seeded.ok("key", "create", "k", "--budget-usd", "3")
    before = seeded.generation()
    for args in (["key", "set", "k"], ["key", "create", "new"]):
        r = seeded(*args, f"--budget-usd={usd}")
        assert r.returncode == 2, (usd, r.stderr)
        assert f"invalid value '{usd}' for --budget-usd" in r.stderr
        assert r.stdout == ""
    assert limits(seeded, "k")[3] == 3000000
    assert seeded.query("SELECT count(*) FROM keys") == [(1,)]
    assert seeded.generation() == before


@pytest.mark.parametrize("option", ["--rpm", "--tpm", "--max-concurrent"])
@pytest.mark.parametrize("value", ["0", "-1", "1.5", "1e3", "", "ten", "None", "1000000000001",
                                   "99999999999999999999999"])
def test_key_integer_limits_rejected(seeded, option, value):
    seeded.ok("key", "create", "k")
    for args in (["key", "set", "k"], ["key", "create", "new"]):
        r = seeded(*args, f"{option}={value}")
        assert r.returncode == 2, (option, value, r.stderr)
        assert f"invalid value '{value}' for {option}" in r.stderr
        assert "--help" in r.stderr and r.stdout == ""
    assert limits(seeded, "k") == (None, None, None, None, "month")
    assert seeded.query("SELECT count(*) FROM keys") == [(1,)]


def test_key_set_unknown_key(seeded):
    before = seeded.generation()
    r = seeded("key", "set", "ghost", "--rpm", "5")
    assert r.returncode == 1 and "no key named 'ghost'" in r.stderr and r.stdout == ""
    assert seeded.generation() == before


def test_key_set_revoked_key(seeded):
    seeded.ok("key", "create", "old")
    seeded.ok("key", "revoke", "old")
    seeded.ok("key", "set", "old", "--rpm", "5")
    assert limits(seeded, "old")[0] == 5


def test_key_set_bumps_config_generation(seeded):
    seeded.ok("key", "create", "k")
    for args in (["--rpm", "5"], ["--rpm", "none"], ["--budget-usd", "1.5"],
                 ["--budget-period", "total"], ["--models", "gpt-4o"],
                 ["--default-model", "gpt-4o"]):
        before = seeded.generation()
        seeded.ok("key", "set", "k", *args)
        assert seeded.generation() > before, args


def test_key_set_models_and_default(seeded):
    seeded.ok("key", "create", "k", "--models", "gpt-4o", "--default-model", "gpt-4o",
              "--rpm", "9")
    allowed = ("SELECT model FROM key_models JOIN keys ON keys.id = key_id"
               " WHERE keys.name = 'k' ORDER BY model")
    # --models replaces the list, --default-model moves within it; limits stay.
    seeded.ok("key", "set", "k", "--models", "gpt-4o-mini,claude-sonnet-4",
              "--default-model", "claude-sonnet-4")
    assert seeded.query(allowed) == [("claude-sonnet-4",), ("gpt-4o-mini",)]
    assert seeded.query("SELECT default_model, rpm FROM keys WHERE name = 'k'") == \
        [("claude-sonnet-4", 9)]
    seeded.ok("key", "set", "k", "--default-model", "gpt-4o-mini")
    assert seeded.query("SELECT default_model FROM keys WHERE name = 'k'") == [("gpt-4o-mini",)]

    before = seeded.generation()
    failures = [
        # Against the arguments alone: usage errors.
        (["--models", "gpt-4o", "--default-model", "gpt-4o-mini"], 2, "not in --models"),
        (["--models", "gpt-4o,,x"], 2, "invalid model name"),
        # Against the stored key: runtime failures, nothing changed.
        (["--models", "gpt-4o"], 1, "default model would not be in its allowed models"),
        (["--default-model", "gpt-4o"], 1, "default model would not be in its allowed models"),
        (["--models", "gpt-4o,ghost"], 1, "unknown model 'ghost'"),
        (["--default-model", "ghost"], 1, "unknown model 'ghost'"),
    ]
    for args, code, message in failures:
        r = seeded("key", "set", "k", *args)
        assert r.returncode == code, (args, r.stderr)
        assert message in r.stderr, (args, r.stderr)
    assert seeded.query(allowed) == [("claude-sonnet-4",), ("gpt-4o-mini",)]
    assert seeded.query("SELECT default_model FROM keys WHERE name = 'k'") == [("gpt-4o-mini",)]
    assert seeded.generation() == before


def test_key_list_limits(seeded):
    seeded.ok("key", "create", "capped", "--rpm", "60", "--tpm", "90000", "--max-concurrent",
              "3", "--budget-usd", "12.5", "--budget-period", "day")
    seeded.ok("key", "create", "tiny", "--budget-usd", "0.000001", "--budget-period", "total")
    seeded.ok("key", "create", "whole", "--budget-usd", "1000000000")
    seeded.ok("key", "create", "open")

    rows = {k["name"]: k for k in seeded.json("key", "list")}
    limit_members = ("rpm", "tpm", "max_concurrent", "budget_micros", "budget_period")
    assert [rows["capped"][m] for m in limit_members] == [60, 90000, 3, 12500000, "day"]
    assert [rows["tiny"][m] for m in limit_members] == [None, None, None, 1, "total"]
    assert rows["whole"]["budget_micros"] == 1000000000000000
    assert [rows["open"][m] for m in limit_members] == [None, None, None, None, "month"]

    lines = seeded.ok("key", "list").splitlines()
    assert lines[0].split()[-6:] == ["RPM", "TPM", "MAX_CONC", "BUDGET_USD", "PERIOD", "TIME_ZONE"]
    cells = {line.split()[1]: line.split()[-6:] for line in lines[1:]}
    assert cells == {"capped": ["60", "90000", "3", "12.5", "day", "-"],
                     "tiny": ["-", "-", "-", "0.000001", "total", "-"],
                     "whole": ["-", "-", "-", "1000000000", "month", "-"],
                     "open": ["-", "-", "-", "-", "month", "-"]}
    seeded.ok("key", "set", "open", "--budget-usd", "0.5", "--budget-tz", "Asia/Kolkata")
    assert seeded.ok("key", "list").splitlines()[4].split()[-3:] == ["0.5", "month", "Asia/Kolkata"]


# ---- teams ----

TEAM_SQL = ("SELECT id, rpm, tpm, max_concurrent, budget_micros, budget_period FROM teams"
            " WHERE name = ?")


def team(ctl, name):
    """(id, rpm, tpm, max_concurrent, budget_micros, budget_period) of team name."""
    return ctl.query(TEAM_SQL, (name,))[0]


def team_models(ctl, name):
    return [m for m, in ctl.query("SELECT model FROM team_models JOIN teams ON teams.id = team_id"
                                  " WHERE teams.name = ? ORDER BY model", (name,))]


def key_team(ctl, key):
    """The name of key's team, None for none."""
    return ctl.query("SELECT t.name FROM keys k LEFT JOIN teams t ON t.id = k.team_id"
                     " WHERE k.name = ?", (key,))[0][0]


def test_team_create_set_list(seeded):
    assert seeded.ok("team", "create", "search", "--rpm", "600", "--tpm", "200000",
                     "--max-concurrent", "20", "--budget-usd", "500.25", "--budget-period",
                     "day", "--models", "gpt-4o,gpt-4o-mini") == "created team search\n"
    assert seeded.ok("team", "create", "ads") == "created team ads\n"
    search_id = team(seeded, "search")[0]
    assert team(seeded, "search")[1:] == (600, 200000, 20, 500250000, "day")
    assert team(seeded, "ads")[1:] == (None, None, None, None, "month")
    assert team_models(seeded, "search") == ["gpt-4o", "gpt-4o-mini"]
    assert team_models(seeded, "ads") == []

    # set changes what it is given only, and keeps the team's id (its keys, its rows).
    create_key(seeded, "k1", "--team", "search")
    assert seeded.ok("team", "set", "search", "--rpm", "60", "--budget-period", "month") == \
        "updated team search\n"
    assert team(seeded, "search") == (search_id, 60, 200000, 20, 500250000, "month")
    seeded.ok("team", "set", "search", "--models", "claude-sonnet-4")
    assert team_models(seeded, "search") == ["claude-sonnet-4"]
    assert team(seeded, "search") == (search_id, 60, 200000, 20, 500250000, "month")
    assert key_team(seeded, "k1") == "search"

    # none lifts a limit; '' and none lift the allow-list.
    seeded.ok("team", "set", "search", "--rpm", "none", "--max-concurrent=none")
    assert team(seeded, "search")[1:] == (None, 200000, None, 500250000, "month")
    seeded.ok("team", "set", "search", "--tpm", "none", "--budget-usd", "none")
    assert team(seeded, "search")[1:] == (None, None, None, None, "month")
    seeded.ok("team", "set", "search", "--models", "")
    assert team_models(seeded, "search") == []
    seeded.ok("team", "set", "search", "--models", "gpt-4o")
    seeded.ok("team", "set", "search", "--models", "none")
    assert team_models(seeded, "search") == []
    seeded.ok("team", "set", "search", "--rpm", "7", "--budget-usd", "0.000001",
              "--models", "gpt-4o-mini,gpt-4o")

    create_key(seeded, "k2", "--team", "search")
    create_key(seeded, "k3", "--team", "search")
    seeded.ok("key", "revoke", "k3")
    create_key(seeded, "k4")
    listed = seeded.json("team", "list")
    assert [t["name"] for t in listed] == ["search", "ads"]
    assert set(listed[0]) == {"id", "name", "created_at", "active_keys", "models", "rpm", "tpm",
                              "max_concurrent", "budget_micros", "budget_period", "budget_tz",
                              "members_see_usage", "tags"}
    assert {k: v for k, v in listed[0].items() if k != "created_at"} == {
        "id": search_id, "name": "search", "active_keys": 2, "models": ["gpt-4o", "gpt-4o-mini"],
        "rpm": 7, "tpm": None, "max_concurrent": None, "budget_micros": 1,
        "budget_period": "month", "budget_tz": None, "members_see_usage": False, "tags": None}
    assert listed[1]["active_keys"] == 0 and listed[1]["models"] is None
    assert isinstance(listed[0]["created_at"], int)

    lines = seeded.ok("team", "list").splitlines()
    assert lines[0].split() == ["ID", "NAME", "CREATED", "ACTIVE_KEYS", "MODELS", "RPM", "TPM",
                                "MAX_CONC", "BUDGET_USD", "PERIOD", "TIME_ZONE",
                                "MEMBERS_SEE_USAGE", "TAGS"]
    cells = [line.split() for line in lines[1:]]
    assert [c[:2] + c[3:] for c in cells] == [
        [str(search_id), "search", "2", "gpt-4o,gpt-4o-mini", "7", "-", "-", "0.000001", "month",
         "-", "no", "-"],
        [str(listed[1]["id"]), "ads", "0", "*", "-", "-", "-", "-", "month", "-", "no", "-"]]


def sees(ctl, name):
    """teams.members_see_usage of team name."""
    return ctl.query("SELECT members_see_usage FROM teams WHERE name = ?", (name,))[0][0]


def test_team_members_see_usage(seeded):
    """--members-see-usage yes|no: no when create is not told, kept by a set that does
    not name it, the only option a set may give; list shows it as yes or no (JSON: a
    boolean)."""
    seeded.ok("team", "create", "quiet")
    seeded.ok("team", "create", "open", "--members-see-usage", "yes", "--rpm", "5")
    seeded.ok("team", "create", "told", "--members-see-usage=no")
    assert [sees(seeded, t) for t in ("quiet", "open", "told")] == [0, 1, 0]
    assert team(seeded, "open")[1] == 5

    before = seeded.generation()
    assert seeded.ok("team", "set", "quiet", "--members-see-usage", "yes") == "updated team quiet\n"
    assert seeded.generation() > before
    assert sees(seeded, "quiet") == 1
    seeded.ok("team", "set", "quiet", "--rpm", "9", "--models", "gpt-4o")
    assert sees(seeded, "quiet") == 1 and team(seeded, "quiet")[1] == 9
    seeded.ok("team", "set", "open", "--members-see-usage", "no", "--tpm", "100")
    assert sees(seeded, "open") == 0 and team(seeded, "open")[1:3] == (5, 100)
    seeded.ok("team", "set", "open", "--members-see-usage", "no")
    assert sees(seeded, "open") == 0

    assert {t["name"]: t["members_see_usage"] for t in seeded.json("team", "list")} == \
        {"quiet": True, "open": False, "told": False}
    lines = seeded.ok("team", "list").splitlines()
    assert lines[0].split()[-2] == "MEMBERS_SEE_USAGE"
    assert [(line.split()[1], line.split()[-2]) for line in lines[1:]] == \
        [("quiet", "yes"), ("open", "no"), ("told", "no")]


def test_team_limit_errors_are_the_keys(seeded):
    """One parser for both: every bad limit is refused with the key's message, and
    changes nothing."""
    seeded.ok("team", "create", "t", "--rpm", "5")
    create_key(seeded, "k")
    before = seeded.generation()
    for option, value in [("--rpm", "-1"), ("--rpm", "0"), ("--tpm", "1.5"),
                          ("--max-concurrent", "1000000000001"), ("--budget-usd", "0"),
                          ("--budget-usd", "1.0000001"), ("--budget-period", "year"),
                          ("--budget-period", "none"), ("--models", "gpt-4o,,x"),
                          ("--models", "bad model")]:
        for verb, name in (("set", "t"), ("create", "new")):
            r = seeded("team", verb, name, f"{option}={value}")
            assert r.returncode == 2 and r.stdout == "", (option, value, r.stderr)
            k = seeded("key", verb, "k" if verb == "set" else "new", f"{option}={value}")
            assert k.returncode == 2, k.stderr
            assert r.stderr == k.stderr.replace(f"key {verb}", f"team {verb}"), (r.stderr, k.stderr)
    assert "invalid value '-1' for --rpm" in seeded("team", "set", "t", "--rpm", "-1").stderr
    assert team(seeded, "t")[1:] == (5, None, None, None, "month")
    assert seeded.query("SELECT name FROM teams") == [("t",)]
    assert seeded.generation() == before


@pytest.mark.parametrize("args, code, message", [
    (["team", "create", "t"], 1, "a team named 't' already exists"),
    (["team", "create", "bad name"], 2, "invalid team name 'bad name'"),
    (["team", "create", "a" * 65], 2, "invalid team name"),
    (["team", "create", "none"], 2, "invalid team name 'none'"),
    (["team", "create", "new", "--models", "ghost"], 1, "unknown model 'ghost'"),
    (["team", "create", "new", "--default-model", "gpt-4o"], 2, "unknown option '--default-model'"),
    (["team", "create", "new", "--team", "t"], 2, "unknown option '--team'"),
    (["team", "create"], 2, "missing NAME"),
    (["team", "set", "t"], 2, "nothing to change"),
    (["team", "set", "ghost", "--rpm", "5"], 1, "no team named 'ghost'"),
    (["team", "set", "t", "--models", "gpt-4o,ghost"], 1, "unknown model 'ghost'"),
    (["team", "set", "t", "--audio", "deny"], 2, "unknown option '--audio'"),
    (["team", "create", "new", "--members-see-usage", "maybe"], 2,
     "team create: invalid value 'maybe' for --members-see-usage: expected yes or no"),
    (["team", "set", "t", "--members-see-usage", "Yes"], 2,
     "team set: invalid value 'Yes' for --members-see-usage: expected yes or no"),
    (["team", "set", "t", "--members-see-usage=1", "--rpm", "9"], 2,
     "invalid value '1' for --members-see-usage"),
    (["team", "set", "t", "--members-see-usage"], 2, "--members-see-usage needs a value"),
    (["key", "create", "k2", "--members-see-usage", "yes"], 2,
     "unknown option '--members-see-usage'"),
    (["team", "delete", "ghost"], 1, "no team named 'ghost'"),
    (["team", "delete"], 2, "missing NAME"),
    (["team", "list", "extra"], 2, "unexpected argument 'extra'"),
    (["key", "create", "k2", "--team", "ghost"], 1, "no team named 'ghost'"),
    (["key", "create", "k2", "--team", "bad name"], 2, "invalid team name 'bad name'"),
    (["key", "create", "k2", "--team"], 2, "--team needs a value"),
    (["key", "set", "k", "--team", "ghost"], 1, "no team named 'ghost'"),
    (["key", "set", "k", "--team", "ghost", "--rpm", "9"], 1, "no team named 'ghost'"),
    (["key", "set", "ghost", "--team", "t"], 1, "no key named 'ghost'"),
])
def test_team_refused_changes_nothing(seeded, args, code, message):
    seeded.ok("team", "create", "t", "--rpm", "5", "--models", "gpt-4o")
    seeded.ok("key", "create", "k", "--team", "t")
    state = lambda: (seeded.query("SELECT * FROM teams ORDER BY id"),
                     seeded.query("SELECT * FROM team_models ORDER BY model"),
                     seeded.query("SELECT name, team_id, rpm FROM keys ORDER BY id"),
                     seeded.generation())
    before = state()
    r = seeded(*args)
    assert r.returncode == code, (args, r.stdout, r.stderr)
    assert message in r.stderr and r.stdout == "", r.stderr
    assert ("--help" in r.stderr) == (code == 2)
    assert state() == before


def test_key_team_create_and_move(seeded):
    seeded.ok("team", "create", "search")
    seeded.ok("team", "create", "ads")
    create_key(seeded, "k1", "--team", "search", "--rpm", "5")
    seeded.ok("key", "create", "--name", "k2", "--team=ads")
    create_key(seeded, "k3")
    assert [key_team(seeded, k) for k in ("k1", "k2", "k3")] == ["search", "ads", None]
    listed = {k["name"]: k["team"] for k in seeded.json("key", "list")}
    assert listed == {"k1": "search", "k2": "ads", "k3": None}
    lines = seeded.ok("key", "list").splitlines()
    assert [line.split()[1:3] for line in lines[1:]] == [["k1", "search"], ["k2", "ads"],
                                                          ["k3", "-"]]

    # Moving a key keeps the key (its id, hence its rows) and what else it has.
    key_id = seeded.query("SELECT id FROM keys WHERE name = 'k1'")[0][0]
    before = seeded.generation()
    assert seeded.ok("key", "set", "k1", "--team", "ads") == "updated key k1\n"
    assert seeded.generation() > before
    assert seeded.query("SELECT id, rpm FROM keys WHERE name = 'k1'") == [(key_id, 5)]
    assert key_team(seeded, "k1") == "ads"
    seeded.ok("key", "set", "k3", "--team", "search", "--tpm", "100")
    assert key_team(seeded, "k3") == "search"
    seeded.ok("key", "set", "k2", "--team", "none")
    assert key_team(seeded, "k2") is None
    # Other options leave the team alone.
    seeded.ok("key", "set", "k1", "--rpm", "6")
    assert key_team(seeded, "k1") == "ads"
    # A revoked key moves too (a team is deleted only once none belongs to it).
    seeded.ok("key", "revoke", "k3")
    seeded.ok("key", "set", "k3", "--team", "none")
    assert key_team(seeded, "k3") is None
    assert {t["name"]: t["active_keys"] for t in seeded.json("team", "list")} == \
        {"search": 0, "ads": 1}


def test_models_lifted_for_keys_too(seeded):
    """The allow-list options are the teams': '' and none give a key every model."""
    create_key(seeded, "k", "--models", "gpt-4o", "--default-model", "gpt-4o")
    allowed = "SELECT count(*) FROM key_models JOIN keys ON keys.id = key_id WHERE name = 'k'"
    assert seeded.query(allowed) == [(1,)]
    seeded.ok("key", "set", "k", "--models", "none")
    assert seeded.query(allowed) == [(0,)]
    seeded.ok("key", "set", "k", "--models", "gpt-4o-mini,gpt-4o")
    seeded.ok("key", "set", "k", "--models", "")
    assert seeded.query(allowed) == [(0,)]
    assert seeded.query("SELECT default_model FROM keys WHERE name = 'k'") == [("gpt-4o",)]
    create_key(seeded, "open", "--models", "none", "--default-model", "claude-sonnet-4")
    assert seeded.json("key", "list")[1]["models"] is None


def test_team_delete(seeded):
    seeded.ok("team", "create", "gone", "--models", "gpt-4o", "--rpm", "5")
    seeded.ok("team", "create", "stays")
    create_key(seeded, "k1", "--team", "gone")
    create_key(seeded, "k2", "--team", "gone")
    gone = team(seeded, "gone")[0]
    seeded.ok("key", "revoke", "k2")

    def refused(n):
        before = seeded.generation()
        r = seeded("team", "delete", "gone")
        assert r.returncode == 1 and r.stdout == "", r.stderr
        assert r.stderr.startswith(f"tallyctl: cannot delete team 'gone': {n} ")
        assert "revoked ones included" in r.stderr and "--team" in r.stderr
        assert team(seeded, "gone")[0] == gone and team_models(seeded, "gone") == ["gpt-4o"]
        assert seeded.generation() == before
        return r.stderr

    assert "2 keys still belong to it" in refused(2)
    seeded.ok("key", "set", "k1", "--team", "stays")
    # Revoked keys count: their rows name the team.
    assert "1 key still belongs to it" in refused(1)
    seeded.ok("key", "set", "k2", "--team", "none")

    # Its rows and rollups keep its id.
    seeded.query("INSERT INTO requests (request_id, outcome, usage_source, started_at, team_id)"
                 " VALUES ('r1', 'complete', 'response', 1, ?)", (gone,))
    seeded.query("INSERT INTO team_daily (day, team_id, requests, errors, streams, prompt_tokens,"
                 " completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,"
                 " cost_micros, unpriced, duration_ms_sum, " +
                 ", ".join(f"lat_le_{b}" for b in (25, 50, 100, 200, 350, 500, 750, 1000, 1500,
                                                   2500, 4000, 6000, 10000, 20000, 60000)) +
                 ", lat_gt_60000) VALUES (0, ?" + ", 1" * 27 + ")", (gone,))
    before = seeded.generation()
    assert seeded.ok("team", "delete", "gone") == "deleted team gone\n"
    assert seeded.generation() > before
    assert seeded.query("SELECT name FROM teams") == [("stays",)]
    assert seeded.query("SELECT count(*) FROM team_models") == [(0,)]
    assert seeded.query("SELECT team_id FROM requests WHERE request_id = 'r1'") == [(gone,)]
    assert seeded.query("SELECT team_id, requests FROM team_daily") == [(gone, 1)]
    assert [t["name"] for t in seeded.json("team", "list")] == ["stays"]
    r = seeded("team", "delete", "gone")
    assert r.returncode == 1 and "no team named 'gone'" in r.stderr
    # The name is free again; the new team is another team.
    seeded.ok("team", "create", "gone")
    assert team(seeded, "gone")[0] != gone


# ---- exit status contract ----

@pytest.mark.parametrize("args, message", [
    ([], "missing command"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["key"], "missing subcommand"),
    (["key", "frob"], "unknown command 'key frob'"),
    (["--bogus", "key", "list"], "unknown option '--bogus'"),
    (["--db"], "--db needs a value"),
    (["key", "list", "--bogus"], "unknown option '--bogus'"),
    (["key", "list", "-x"], "unknown option '-x'"),
    (["key", "list", "--json=yes"], "--json takes no value"),
    (["key", "list", "extra"], "unexpected argument 'extra'"),
    (["key", "create"], "missing NAME"),
    (["key", "create", "a", "--name", "b"], "either as an argument or with --name"),
    (["key", "create", "a", "b"], "unexpected argument 'b'"),
    (["key", "create", "--name"], "--name needs a value"),
    (["key", "create", "--name", "a", "--name", "b"], "--name given twice"),
    (["key", "create", "--name", "a", "--provider", "p"], "unknown option '--provider'"),
    (["key", "create", "--name", "a", "--models", "gpt-4o,,x"], "invalid model name"),
    (["key", "set"], "missing NAME"),
    (["key", "set", "k"], "nothing to change"),
    (["key", "set", "k", "--name", "x"], "unknown option '--name'"),
    (["key", "set", "k", "--json"], "unknown option '--json'"),
    (["key", "set", "k", "--rpm"], "--rpm needs a value"),
    (["key", "set", "k", "--budget-period", "fortnight"], "--budget-period"),
    (["key", "create", "k", "--budget-period", "Month"], "--budget-period"),
    (["key", "revoke"], "missing NAME"),
    (["key", "revoke", "a", "b"], "unexpected argument 'b'"),
    (["model", "set", "m"], "missing required option --provider"),
    (["model", "set", "--provider", "openai"], "missing NAME"),
    (["model", "set", "m", "--provider", "openai", "--input-micros", "-1"], "--input-micros"),
    (["model", "set", "m", "--provider", "openai", "--output-micros", "1.5"], "--output-micros"),
    (["model", "set", "m", "--provider", "openai", "--cached-micros", "ten"], "--cached-micros"),
    (["model", "set", "m", "--provider", "openai", "--cache-write-micros", "-5"],
     "--cache-write-micros"),
    (["model", "set", "m", "--provider", "openai", "--input-micros", ""], "--input-micros"),
    (["model", "set", "m", "--provider", "openai", "--input-micros", "1000000000001"],
     "--input-micros"),
    (["model", "set", "m", "--provider", "openai", "--input-micros", "99999999999999999999999"],
     "--input-micros"),
    (["model", "set", "bad,name", "--provider", "openai"], "invalid model name"),
    (["model", "list", "--json", "--json"], "given twice"),
    (["prices", "set"], "missing MODEL"),
    (["prices", "delete", "gpt-4o", "--tier", "default"], "missing required option --above"),
    (["prices", "delete", "gpt-4o", "--above", "0"], "missing required option --tier"),
    (["prices", "delete", "gpt-4o", "--tier", "BAD", "--above", "0"], "for --tier"),
    # Longer than any tier the agent reads (common/tier.h): its card would never apply.
    (["prices", "set", "gpt-4o", "--tier", "t" * 24, "--input-micros", "1"], "for --tier"),
    (["prices", "list", "a", "b"], "unexpected argument 'b'"),
    (["prices", "list", "--verbose"], "unknown option '--verbose'"),
    (["prices", "import"], "missing FILE"),
    (["prices", "import", "f.json", "--format"], "--format needs a value"),
    (["provider", "set", "p", "--api", "gemini", "--backend", "be"], "--api"),
    (["provider", "set", "p", "--backend", "be"], "missing required option --api"),
    (["provider", "set", "p", "--api", "openai"], "missing required option --backend"),
    (["provider", "set", "p", "--api", "openai", "--backend", "b e"], "invalid backend"),
    (["provider", "set", "p", "--api", "openai", "--backend", "be", "--url", "ftp://x"],
     "--url"),
    (["provider", "set", "bad/name", "--api", "openai", "--backend", "be"],
     "invalid provider name"),
])
def test_usage_errors_exit_2(seeded, args, message):
    before = seeded.generation()
    r = seeded(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert "--help" in r.stderr
    assert r.stdout == ""
    assert seeded.generation() == before


@pytest.mark.parametrize("args, message", [
    (["key", "revoke", "ghost"], "no key named 'ghost'"),
    (["key", "set", "ghost", "--budget-usd", "1"], "no key named 'ghost'"),
    (["key", "create", "--name", "k", "--models", "ghost"], "unknown model 'ghost'"),
    (["key", "create", "--name", "k", "--default-model", "ghost"], "unknown model 'ghost'"),
    (["model", "set", "m", "--provider", "ghost"], "unknown provider 'ghost'"),
    (["prices", "set", "ghost", "--input-micros", "1"], "unknown model 'ghost'"),
    (["prices", "list", "ghost"], "unknown model 'ghost'"),
    (["prices", "delete", "ghost", "--tier", "default", "--above", "0"], "unknown model 'ghost'"),
])
def test_unknown_names_exit_1(seeded, args, message):
    before = seeded.generation()
    r = seeded(*args)
    assert r.returncode == 1, (args, r.stdout, r.stderr)
    assert message in r.stderr
    assert r.stdout == ""
    assert seeded.generation() == before


# ---- rate cards: model set, prices set, list, delete ----

def test_model_set_writes_default_card(seeded):
    assert cards(seeded, "gpt-4o") == {("default", 0): card(
        input_micros_per_mtok=2500000, output_micros_per_mtok=10000000,
        cached_micros_per_mtok=1250000)}
    # A model given no price has no card: unpriced, not free.
    assert cards(seeded, "gpt-4o-mini") == {}

    # Prices set elsewhere on the card, and other cards, survive a partial update.
    seeded.ok("prices", "set", "gpt-4o", "--cache-write-1h-micros", "5000000")
    seeded.ok("prices", "set", "gpt-4o", "--tier", "priority", "--input-micros", "4250000")
    seeded.ok("model", "set", "gpt-4o", "--provider", "openai", "--cache-write-micros", "3125000",
              "--input-micros", "2000000")
    assert cards(seeded, "gpt-4o") == {
        ("default", 0): card(input_micros_per_mtok=2000000, output_micros_per_mtok=10000000,
                             cached_micros_per_mtok=1250000, cache_write_micros_per_mtok=3125000,
                             cache_write_1h_micros_per_mtok=5000000),
        ("priority", 0): card(input_micros_per_mtok=4250000)}

    models = {m["name"]: m for m in seeded.json("model", "list")}
    assert models["gpt-4o"]["price_cards"] == 2
    assert models["gpt-4o"]["cache_write_micros_per_mtok"] == 3125000
    assert models["gpt-4o-mini"]["price_cards"] == 0
    # A model whose only card is not the default one lists no default prices.
    seeded.ok("prices", "set", "gpt-4o-mini", "--tier", "flex", "--output-micros", "300000")
    mini = {m["name"]: m for m in seeded.json("model", "list")}["gpt-4o-mini"]
    assert (mini["input_micros_per_mtok"], mini["output_micros_per_mtok"], mini["price_cards"]) \
        == (None, None, 1)
    line = [row.split() for row in seeded.ok("model", "list").splitlines()
            if row.split()[1] == "gpt-4o"][0]
    assert line[3:8] == ["2000000", "10000000", "1250000", "3125000", "2"]


def test_prices_set_list_delete(seeded):
    before = seeded.generation()
    every = ["--input-micros", "1", "--cached-micros", "2", "--cache-write-micros", "3",
             "--cache-write-1h-micros", "4", "--output-micros", "5", "--reasoning-micros", "6",
             "--audio-input-micros", "7", "--audio-output-micros", "8",
             "--web-search-micros-per-call", "9"]
    assert seeded.ok("prices", "set", "gpt-4o", "--tier", "priority", *every) == \
        "created card of model gpt-4o: tier priority above 0 tokens\n"
    assert seeded.generation() > before
    full = dict(zip(PRICE_COLUMNS, range(1, 10)))
    assert cards(seeded, "gpt-4o")[("priority", 0)] == full

    # Long-context card; a partial update changes only what it names; 0 is a price.
    assert seeded.ok("prices", "set", "gpt-4o", "--above=200000", "--input-micros", "5000000") == \
        "created card of model gpt-4o: tier default above 200000 tokens\n"
    assert seeded.ok("prices", "set", "gpt-4o", "--tier", "priority", "--output-micros", "0",
                     "--web-search-micros-per-call", "1000000000000") == \
        "updated card of model gpt-4o: tier priority above 0 tokens\n"
    full.update(output_micros_per_mtok=0, web_search_micros_per_call=1000000000000)
    assert cards(seeded, "gpt-4o") == {
        ("default", 0): card(input_micros_per_mtok=2500000, output_micros_per_mtok=10000000,
                             cached_micros_per_mtok=1250000),
        ("default", 200000): card(input_micros_per_mtok=5000000),
        ("priority", 0): full}

    lines = seeded.ok("prices", "list").splitlines()
    assert lines[0].split() == ["MODEL", "TIER", "ABOVE", "INPUT", "CACHED", "CACHE_WRITE",
                                "CACHE_WRITE_1H", "OUTPUT", "REASONING", "AUDIO_INPUT",
                                "AUDIO_OUTPUT", "WEB_SEARCH"]
    # Models by name, the default tier first, then by prompt size.
    assert [line.split() for line in lines[1:]] == [
        ["claude-sonnet-4", "default", "0", "3000000", "-", "-", "-", "15000000", "-", "-", "-",
         "-"],
        ["gpt-4o", "default", "0", "2500000", "1250000", "-", "-", "10000000", "-", "-", "-", "-"],
        ["gpt-4o", "default", "200000", "5000000"] + ["-"] * 8,
        ["gpt-4o", "priority", "0", "1", "2", "3", "4", "0", "6", "7", "8", "1000000000000"]]
    assert [line.split() for line in seeded.ok("prices", "list", "claude-sonnet-4").splitlines()] \
        == [lines[0].split(), lines[1].split()]

    exported = seeded.json("prices", "list")
    assert list(exported) == ["models"]
    assert list(exported["models"]) == ["claude-sonnet-4", "gpt-4o"]
    assert exported["models"]["gpt-4o"][2] == dict(tier="priority", above_tokens=0, **full)
    assert exported["models"]["claude-sonnet-4"] == [dict(
        tier="default", above_tokens=0, **card(input_micros_per_mtok=3000000,
                                                output_micros_per_mtok=15000000))]
    assert seeded.json("prices", "list", "gpt-4o-mini") == {"models": {}}

    before = seeded.generation()
    assert seeded.ok("prices", "delete", "gpt-4o", "--tier", "priority", "--above", "0") == \
        "deleted card of model gpt-4o: tier priority above 0 tokens\n"
    assert seeded.generation() > before
    assert set(cards(seeded, "gpt-4o")) == {("default", 0), ("default", 200000)}
    r = seeded("prices", "delete", "gpt-4o", "--tier", "priority", "--above", "0")
    assert r.returncode == 1 and "has no card of tier priority above 0" in r.stderr
    r = seeded("prices", "delete", "gpt-4o", "--tier", "default", "--above", "100000")
    assert r.returncode == 1
    assert set(cards(seeded, "gpt-4o")) == {("default", 0), ("default", 200000)}

    # Deleting a model's cards goes with the model (ON DELETE CASCADE keeps no orphans).
    seeded.ok("prices", "delete", "gpt-4o", "--tier", "default", "--above", "200000")
    assert seeded.query("SELECT count(*) FROM model_prices") == [(2,)]


@pytest.mark.parametrize("args, message", [
    (["--input-micros", "-1"], "--input-micros"),
    (["--reasoning-micros", "1.5"], "--reasoning-micros"),
    (["--audio-input-micros", "1000000000001"], "--audio-input-micros"),
    (["--audio-output-micros", ""], "--audio-output-micros"),
    (["--web-search-micros-per-call", "ten"], "micro-dollars per call"),
    (["--cache-write-1h-micros", "1e6"], "--cache-write-1h-micros"),
    (["--tier", "Priority", "--input-micros", "1"], "invalid value 'Priority' for --tier"),
    (["--tier", "", "--input-micros", "1"], "for --tier"),
    (["--tier", "a b", "--input-micros", "1"], "for --tier"),
    (["--tier", "x" * 65, "--input-micros", "1"], "for --tier"),
    (["--above", "-1", "--input-micros", "1"], "--above"),
    (["--above", "200k", "--input-micros", "1"], "--above"),
    (["--tier", "flex"], "nothing to set"),
    ([], "nothing to set"),
    (["--provider", "openai", "--input-micros", "1"], "unknown option '--provider'"),
])
def test_prices_set_refused(seeded, args, message):
    before = seeded.query(CARD_SQL)
    gen = seeded.generation()
    r = seeded("prices", "set", "gpt-4o", *args)
    assert r.returncode == 2, (args, r.stderr)
    assert message in r.stderr and r.stdout == ""
    assert seeded.query(CARD_SQL) == before
    assert seeded.generation() == gen


def warnings(r):
    return [line[len(WARNING):] for line in r.stderr.splitlines() if line.startswith(WARNING)]


def test_classes_left_unpriced_are_warned_about(seeded, tmp_path):
    """model set, prices set and prices import name each card's classes without a price
    (the agent charges them at a fallback rate, docs/pricing.md); reasoning and hour-long
    writes, priced as output and cache writes when unset, are not named."""
    tail = (": such usage is charged at the card's dearest token rate (web searches at"
            " $0.05 per call; docs/pricing.md)")
    r = seeded("model", "set", "gpt-4o", "--provider", "openai", "--input-micros", "2500000",
               "--output-micros", "10000000")
    assert r.returncode == 0
    # (seeded priced its cached tokens; model set keeps a price it is not given)
    assert warnings(r) == ["model gpt-4o, card default above 0 tokens, prices no"
                           " cache_write, audio_input, audio_output, web_search" + tail]
    r = seeded("prices", "set", "gpt-4o", "--cache-write-micros", "3125000",
               "--audio-input-micros", "1", "--audio-output-micros", "2",
               "--web-search-micros-per-call", "3", "--cached-micros", "4")
    assert r.returncode == 0 and r.stderr == ""
    r = seeded("prices", "set", "gpt-4o", "--tier", "priority", "--input-micros", "1",
               "--output-micros", "2", "--cached-micros", "3", "--cache-write-micros", "4",
               "--audio-input-micros", "5", "--audio-output-micros", "6")
    assert warnings(r) == ["model gpt-4o, card priority above 0 tokens, prices no"
                           " web_search" + tail]
    path = write(tmp_path, "prices.json", json.dumps({"models": {"claude-sonnet-4": [
        {"tier": "default", "above_tokens": 0, "input_micros_per_mtok": 3000000,
         "output_micros_per_mtok": 15000000, "cached_micros_per_mtok": 300000,
         "cache_write_micros_per_mtok": 3750000, "web_search_micros_per_call": 10000}]}}))
    r = seeded("prices", "import", path, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["models_priced"] == 1
    assert warnings(r) == ["model claude-sonnet-4, card default above 0 tokens, prices no"
                           " audio_input, audio_output" + tail]


def test_model_max_output(seeded):
    """--max-output sets the model's largest answer (what a request naming no bound is
    estimated at), 'none' clears it, absent leaves it."""
    def stored():
        return seeded.query("SELECT max_output FROM models WHERE name = 'gpt-4o'")[0][0]

    assert stored() is None
    seeded.ok("model", "set", "gpt-4o", "--provider", "openai", "--max-output", "16384")
    assert stored() == 16384
    seeded.ok("model", "set", "gpt-4o", "--provider", "openai", "--input-micros", "1")
    assert stored() == 16384
    for bad in ("0", "-1", "1.5", "x"):
        r = seeded("model", "set", "gpt-4o", "--provider", "openai", "--max-output", bad)
        assert r.returncode == 2 and "--max-output" in r.stderr, (bad, r.stderr)
    assert stored() == 16384
    seeded.ok("model", "set", "gpt-4o", "--provider", "openai", "--max-output", "none")
    assert stored() is None


# ---- prices import ----

def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_import_tally_round_trip(seeded, tmp_path):
    seeded.ok("prices", "set", "gpt-4o", "--tier", "priority", "--input-micros", "5000000",
              "--output-micros", "20000000", "--web-search-micros-per-call", "25000")
    seeded.ok("prices", "set", "claude-sonnet-4", "--above", "200000", "--input-micros", "6000000",
              "--cache-write-1h-micros", "12000000", "--reasoning-micros", "0")
    exported = seeded.json("prices", "list")
    exported["models"]["not-here"] = [{"tier": "default", "above_tokens": 0,
                                       "input_micros_per_mtok": 1}]
    path = write(tmp_path, "prices.json", json.dumps(exported, indent=2))

    # Into a database with the same models and no prices.
    fresh = seeded.sibling("fresh")
    fresh.ok("provider", "set", "openai", "--api", "openai", "--backend", "be_openai")
    fresh.ok("provider", "set", "anthropic", "--api", "anthropic", "--backend", "be_anthropic")
    for model, provider in (("gpt-4o", "openai"), ("gpt-4o-mini", "openai"),
                            ("claude-sonnet-4", "anthropic")):
        fresh.ok("model", "set", model, "--provider", provider)
    report = fresh.json("prices", "import", path)
    assert report == {"file": path, "format": "tally", "dry_run": False, "models_priced": 2,
                      "cards_written": 4, "prefix_matches": [], "ambiguous": [],
                      "no_mapped_prices": [], "not_in_file": ["gpt-4o-mini"],
                      "not_configured": ["not-here"], "unmapped_fields": {}}
    del exported["models"]["not-here"]
    assert fresh.json("prices", "list") == exported
    assert fresh.query("SELECT count(*) FROM models WHERE name = 'not-here'") == [(0,)]

    # A card in the file replaces the stored one whole; cards not in the file stay.
    fresh.ok("prices", "set", "gpt-4o", "--cached-micros", "7", "--audio-input-micros", "8")
    fresh.ok("prices", "set", "gpt-4o", "--tier", "batch", "--input-micros", "1250000")
    out = fresh.ok("prices", "import", "--format", "tally", path, "--verbose")
    assert out.splitlines() == [
        f"prices import {path} (tally)",
        "models priced: 2",
        "cards written: 4",
        "matched after a provider prefix: 0",
        "not priced, several provider-prefixed entries: 0",
        "configured, without a price this format maps: 0",
        "configured, not in the file: 1",
        "  gpt-4o-mini",
        "in the file, not configured: 1",
        "  not-here",
        "unmapped price fields: 0"]
    default, priority = exported["models"]["gpt-4o"]
    assert fresh.json("prices", "list")["models"]["gpt-4o"] == [
        default, dict(tier="batch", above_tokens=0, **card(input_micros_per_mtok=1250000)),
        priority]


def test_import_tally_defaults_and_unknown_members(seeded, tmp_path):
    path = write(tmp_path, "p.json", json.dumps({"models": {"gpt-4o-mini": [
        {"input_micros_per_mtok": 150000, "output_micros_per_mtok": 600000.0,
         "cached_micros_per_mtok": None, "batch_discount": 50},
        {"tier": "flex", "above_tokens": 128000, "output_micros_per_mtok": 300000,
         "batch_discount": 50, "notes": "x"}]}}))
    report = seeded.json("prices", "import", path)
    assert report["unmapped_fields"] == {"batch_discount": 1, "notes": 1}
    assert (report["models_priced"], report["cards_written"]) == (1, 2)
    assert cards(seeded, "gpt-4o-mini") == {
        ("default", 0): card(input_micros_per_mtok=150000, output_micros_per_mtok=600000),
        ("flex", 128000): card(output_micros_per_mtok=300000)}


LITELLM = r"""{
    "sample_spec": {
        "code_interpreter_cost_per_session": 0.0,
        "input_cost_per_token": 0.0,
        "litellm_provider": "one of https://docs.litellm.ai/docs/providers",
        "max_tokens": "LEGACY parameter. set to max_output_tokens if provider specifies it.",
        "mode": "one of: chat, embedding, completion, image_generation, audio_transcription",
        "output_cost_per_token": 0.0,
        "search_context_cost_per_query": {
            "search_context_size_high": 0.0,
            "search_context_size_low": 0.0,
            "search_context_size_medium": 0.0
        },
        "supports_function_calling": true
    },
    "claude-sonnet-4": {
        "cache_creation_input_token_cost": 3.75e-06,
        "cache_creation_input_token_cost_above_1hr": 6e-06,
        "cache_creation_input_token_cost_above_1hr_above_200k_tokens": 1.2e-05,
        "cache_creation_input_token_cost_above_200k_tokens": 7.5e-06,
        "cache_read_input_token_cost": 3e-07,
        "cache_read_input_token_cost_above_200k_tokens": 6e-07,
        "input_cost_per_token": 3e-06,
        "input_cost_per_token_above_200k_tokens": 6e-06,
        "litellm_provider": "anthropic",
        "max_input_tokens": 1000000,
        "max_output_tokens": 64000,
        "mode": "chat",
        "output_cost_per_token": 1.5e-05,
        "output_cost_per_token_above_200k_tokens": 2.25e-05,
        "supports_prompt_caching": true
    },
    "gpt-4o": {
        "cache_read_input_token_cost": 1.25e-06,
        "cache_read_input_token_cost_flex": 6.25e-07,
        "cache_read_input_token_cost_priority": 2.125e-06,
        "input_cost_per_image": 0.003613,
        "input_cost_per_token": 2.5e-06,
        "input_cost_per_token_batches": 1.25e-06,
        "input_cost_per_token_flex": 1.25e-06,
        "input_cost_per_token_priority": 4.25e-06,
        "litellm_provider": "openai",
        "mode": "chat",
        "output_cost_per_token": 1e-05,
        "output_cost_per_token_flex": 5e-06,
        "output_cost_per_token_priority": 1.7e-05,
        "supported_endpoints": ["/v1/chat/completions", "/v1/batch"],
        "supports_service_tier": true
    },
    "gpt-4o-audio-preview": {
        "input_cost_per_audio_token": 4e-05,
        "input_cost_per_token": 2.5e-06,
        "litellm_provider": "openai",
        "mode": "chat",
        "output_cost_per_audio_token": 8e-05,
        "output_cost_per_reasoning_token": 1.2e-05,
        "output_cost_per_second": 0.0001,
        "output_cost_per_token": 1e-05,
        "supports_audio_input": true
    },
    "sonar-pro": {
        "input_cost_per_image": 0.001,
        "input_cost_per_token": 3e-06,
        "input_cost_per_token_priority": 6e-06,
        "litellm_provider": "perplexity",
        "mode": "chat",
        "output_cost_per_token": 1.5e-05,
        "search_context_cost_per_query": {
            "search_context_size_high": 0.014,
            "search_context_size_low": 0.006,
            "search_context_size_medium": 0.01
        },
        "supports_web_search": true
    },
    "mistral-large": {
        "input_cost_per_image": 0.002,
        "input_cost_per_token": 2e-06,
        "litellm_provider": "mistral",
        "mode": "chat",
        "output_cost_per_token": 6e-06,
        "unheard_of_cost": 1
    },
    "anthropic/claude-haiku-4": {
        "cache_creation_input_token_cost": 1e-06,
        "cache_read_input_token_cost": 8e-08,
        "input_cost_per_token": 8e-07,
        "litellm_provider": "anthropic",
        "mode": "chat",
        "output_cost_per_second": 0.0002,
        "output_cost_per_token": 4e-06
    },
    "awkward-1": {
        "cache_creation_input_token_cost": 5e-13,
        "cache_read_input_token_cost": 2.5e-12,
        "input_cost_per_token": 6e-08,
        "output_cost_per_audio_token": null,
        "output_cost_per_reasoning_token": 4.9e-13,
        "output_cost_per_token": 1.23456789e-07,
        "mode": "chat"
    },
    "tts-1": {
        "input_cost_per_character": 1.5e-05,
        "litellm_provider": "openai",
        "mode": "audio_speech"
    }
}
"""

LITELLM_CARDS = {
    "claude-sonnet-4": {
        ("default", 0): card(input_micros_per_mtok=3000000, output_micros_per_mtok=15000000,
                             cached_micros_per_mtok=300000, cache_write_micros_per_mtok=3750000,
                             cache_write_1h_micros_per_mtok=6000000),
        ("default", 200000): card(input_micros_per_mtok=6000000,
                                  output_micros_per_mtok=22500000,
                                  cached_micros_per_mtok=600000,
                                  cache_write_micros_per_mtok=7500000,
                                  cache_write_1h_micros_per_mtok=12000000)},
    "gpt-4o": {
        ("default", 0): card(input_micros_per_mtok=2500000, output_micros_per_mtok=10000000,
                             cached_micros_per_mtok=1250000),
        ("priority", 0): card(input_micros_per_mtok=4250000, output_micros_per_mtok=17000000,
                              cached_micros_per_mtok=2125000),
        ("flex", 0): card(input_micros_per_mtok=1250000, output_micros_per_mtok=5000000,
                          cached_micros_per_mtok=625000)},
    "gpt-4o-audio-preview": {
        ("default", 0): card(input_micros_per_mtok=2500000, output_micros_per_mtok=10000000,
                             audio_input_micros_per_mtok=40000000,
                             audio_output_micros_per_mtok=80000000,
                             reasoning_micros_per_mtok=12000000)},
    # A search costs the same at every tier: on each card.
    "sonar-pro": {
        ("default", 0): card(input_micros_per_mtok=3000000, output_micros_per_mtok=15000000,
                             web_search_micros_per_call=10000),
        ("priority", 0): card(input_micros_per_mtok=6000000, web_search_micros_per_call=10000)},
    "claude-haiku-4": {
        ("default", 0): card(input_micros_per_mtok=800000, output_micros_per_mtok=4000000,
                             cached_micros_per_mtok=80000, cache_write_micros_per_mtok=1000000)},
    # Exact decimal scaling, halves rounded up: 6e-08 is 60000 where a double product
    # truncates to 59999, 2.5e-12 is 3 and 5e-13 is 1 where round() of one says 2 and 0.
    "awkward-1": {
        ("default", 0): card(input_micros_per_mtok=60000, output_micros_per_mtok=123457,
                             cached_micros_per_mtok=3, cache_write_micros_per_mtok=1,
                             reasoning_micros_per_mtok=0)},
    "tts-1": {},
    "gpt-4o-mini": {},
}

LITELLM_REPORT = {
    "format": "litellm", "models_priced": 6, "cards_written": 10,
    "prefix_matches": [{"model": "claude-haiku-4", "entry": "anthropic/claude-haiku-4"}],
    "ambiguous": [], "no_mapped_prices": ["tts-1"], "not_in_file": ["gpt-4o-mini"],
    "not_configured": ["mistral-large"],
    # Counted over the configured models only: mistral-large's fields are not.
    "unmapped_fields": {
        "output_cost_per_second": 2, "input_cost_per_token_batches": 1,
        "input_cost_per_image": 2,
        "search_context_cost_per_query.search_context_size_low": 1,
        "search_context_cost_per_query.search_context_size_high": 1,
        "input_cost_per_character": 1},
}


@pytest.fixture
def litellm(seeded, tmp_path):
    for model in ("gpt-4o-audio-preview", "sonar-pro", "claude-haiku-4", "awkward-1", "tts-1"):
        seeded.ok("model", "set", model, "--provider", "openai")
    return write(tmp_path, "model_prices_and_context_window.json", LITELLM)


def test_import_litellm(seeded, litellm):
    seeded.ok("prices", "set", "gpt-4o", "--tier", "batch", "--input-micros", "1250000")
    before = seeded.generation()
    report = seeded.json("prices", "import", litellm, "--format", "litellm")
    assert report == dict(LITELLM_REPORT, file=litellm, dry_run=False)
    assert seeded.generation() > before
    expected = {m: dict(c) for m, c in LITELLM_CARDS.items()}
    # Cards the file does not hold are kept.
    expected["gpt-4o"][("batch", 0)] = card(input_micros_per_mtok=1250000)
    for model, want in expected.items():
        assert cards(seeded, model) == want, model
    assert seeded.query("SELECT count(*) FROM models WHERE name IN ('mistral-large',"
                        " 'sample_spec', 'anthropic/claude-haiku-4')") == [(0,)]

    # The text report names the prefix match and every unmapped field; --verbose the rest.
    out = seeded.ok("prices", "import", litellm, "--format=litellm").splitlines()
    assert out[:7] == [
        f"prices import {litellm} (litellm)",
        "models priced: 6",
        "cards written: 10",
        "matched after a provider prefix: 1",
        "  claude-haiku-4 <- anthropic/claude-haiku-4",
        "not priced, several provider-prefixed entries: 0",
        "configured, without a price this format maps: 1"]
    assert out[7:10] == ["  tts-1", "configured, not in the file: 1",
                         "in the file, not configured: 1"]
    assert out[10] == "unmapped price fields: 6"
    assert sorted(out[11:]) == sorted([
        "  output_cost_per_second: 2 models", "  input_cost_per_token_batches: 1 model",
        "  input_cost_per_image: 2 models",
        "  search_context_cost_per_query.search_context_size_low: 1 model",
        "  search_context_cost_per_query.search_context_size_high: 1 model",
        "  input_cost_per_character: 1 model"])
    verbose = seeded.ok("prices", "import", litellm, "--format", "litellm", "--verbose")
    assert "configured, not in the file: 1\n  gpt-4o-mini\n" in verbose
    assert "in the file, not configured: 1\n  mistral-large\n" in verbose


def test_import_litellm_exact_name_first_and_ambiguous(seeded, tmp_path):
    seeded.ok("model", "set", "claude-haiku-4", "--provider", "anthropic")
    path = write(tmp_path, "l.json", json.dumps({
        "gpt-4o": {"input_cost_per_token": 2.5e-06},
        "azure/gpt-4o": {"input_cost_per_token": 9e-06},
        "anthropic/claude-haiku-4": {"input_cost_per_token": 8e-07},
        "bedrock/claude-haiku-4": {"input_cost_per_token": 1e-06}}))
    report = seeded.json("prices", "import", path, "--format", "litellm")
    assert report["prefix_matches"] == [] and report["ambiguous"] == ["claude-haiku-4"]
    assert report["not_configured"] == ["azure/gpt-4o", "anthropic/claude-haiku-4",
                                        "bedrock/claude-haiku-4"]
    assert cards(seeded, "gpt-4o") == {("default", 0): card(input_micros_per_mtok=2500000)}
    assert cards(seeded, "claude-haiku-4") == {}
    out = seeded.ok("prices", "import", path, "--format", "litellm")
    assert "not priced, several provider-prefixed entries: 1\n  claude-haiku-4\n" in out


@pytest.mark.parametrize("text, micros", [
    ("3e-06", 3000000),
    ("3E-6", 3000000),
    ("0.000003", 3000000),
    ("3.0000000000000001e-06", 3000000),   # the same double as 3e-06
    ("2.9999999999999997e-06", 3000000),   # the double below it, rounded
    ("1.25e-07", 125000),
    ("6e-08", 60000),                      # a double product truncates to 59999
    ("1.1e-06", 1100000),
    ("2.125e-06", 2125000),
    ("1.23456789e-07", 123457),
    ("2.5e-12", 3),                        # halves round up
    ("1.5e-12", 2),
    ("5e-13", 1),
    ("4.9e-13", 0),
    ("1e-20", 0),
    ("0", 0),
    ("0.0", 0),
    ("-0.0", 0),
    ("1", 1000000000000),                  # $1 per token, the largest price
])
def test_litellm_conversion_exact(seeded, tmp_path, text, micros):
    path = write(tmp_path, "l.json", '{"gpt-4o-mini": {"output_cost_per_token": %s}}' % text)
    seeded.ok("prices", "import", path, "--format", "litellm")
    assert cards(seeded, "gpt-4o-mini") == {("default", 0): card(output_micros_per_mtok=micros)}


def test_web_search_conversion(seeded, tmp_path):
    path = write(tmp_path, "l.json", json.dumps({"gpt-4o-mini": {
        "search_context_cost_per_query": {"search_context_size_medium": 0.035}}}))
    seeded.ok("prices", "import", path, "--format", "litellm")
    assert cards(seeded, "gpt-4o-mini") == {
        ("default", 0): card(web_search_micros_per_call=35000)}


GOOD_ENTRY = '"gpt-4o-mini": {"input_cost_per_token": 1.5e-07}'


@pytest.mark.parametrize("fmt, text, message", [
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"input_cost_per_token": -1e-06}}',
     "model 'gpt-4o': input_cost_per_token: expected a non-negative finite number"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"output_cost_per_token": "3e-06"}}',
     "output_cost_per_token: expected"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"output_cost_per_token": true}}',
     "output_cost_per_token: expected"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"output_cost_per_token": 1e999}}',
     "output_cost_per_token: expected"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"output_cost_per_token": 1.5}}',
     "output_cost_per_token: expected"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"search_context_cost_per_query":'
     ' {"search_context_size_medium": -0.01}}}', "search_context_size_medium: expected"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"search_context_cost_per_query": 0.01}}',
     "search_context_cost_per_query: expected an object"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": [1]}', "model 'gpt-4o': its value: expected"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"input_cost_per_token": 3e-06,}',
     "malformed JSON at line 1"),
    ("litellm", '{' + GOOD_ENTRY + '}\n{}', "malformed JSON at line 2"),
    ("litellm", '[]', "expected a JSON object keyed by model name"),
    ("litellm", '', "malformed JSON"),
    ("litellm", '{' + GOOD_ENTRY + ', "gpt-4o": {"input_cost_per_token": 3e-06}}\0',
     "a NUL byte"),
    ("tally", '{' + GOOD_ENTRY + '}', "a LiteLLM file needs --format litellm"),
    ("tally", '{"models": {"gpt-4o-mini": [{"input_micros_per_mtok": 1}],'
     ' "gpt-4o": [{"input_micros_per_mtok": 1.5}]}}',
     "model 'gpt-4o': input_micros_per_mtok: expected an integer from 0 to 1000000000000"),
    ("tally", '{"models": {"gpt-4o": [{"output_micros_per_mtok": -3}]}}', "expected an integer"),
    ("tally", '{"models": {"gpt-4o": [{"output_micros_per_mtok": 1000000000001}]}}',
     "expected an integer"),
    ("tally", '{"models": {"gpt-4o": [{"tier": "Priority", "input_micros_per_mtok": 1}]}}',
     "tier: expected"),
    ("tally", '{"models": {"gpt-4o": [{"above_tokens": -1, "input_micros_per_mtok": 1}]}}',
     "above_tokens: expected"),
    ("tally", '{"models": {"gpt-4o": [{"input_micros_per_mtok": 1},'
     ' {"tier": "default", "above_tokens": 0}]}}', "one rate card per tier and above_tokens"),
    ("tally", '{"models": {"gpt-4o": {"input_micros_per_mtok": 1}}}',
     "expected an array of rate cards"),
    ("tally", '{"models": {"gpt-4o": [1]}}', "a rate card: expected an object"),
])
def test_import_refused_writes_nothing(seeded, tmp_path, fmt, text, message):
    path = write(tmp_path, "bad.json", text)
    before = seeded.query(CARD_SQL)
    gen = seeded.generation()
    r = seeded("prices", "import", path, "--format", fmt)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert message in r.stderr and path in r.stderr, r.stderr
    assert r.stdout == ""
    assert seeded.query(CARD_SQL) == before   # gpt-4o-mini's good entry included
    assert seeded.generation() == gen


def test_import_unreadable_and_usage(seeded, tmp_path):
    r = seeded("prices", "import", str(tmp_path / "missing.json"))
    assert r.returncode == 1 and "cannot open" in r.stderr
    r = seeded("prices", "import", str(tmp_path))
    assert r.returncode == 1 and "cannot read" in r.stderr
    r = seeded("prices", "import", write(tmp_path, "x.json", "{}"), "--format", "csv")
    assert r.returncode == 2 and "invalid value 'csv' for --format" in r.stderr


def test_import_dry_run_writes_nothing(seeded, litellm):
    before = seeded.query(CARD_SQL)
    gen = seeded.generation()
    report = seeded.json("prices", "import", litellm, "--format", "litellm", "--dry-run")
    assert report == dict(LITELLM_REPORT, file=litellm, dry_run=True)
    out = seeded.ok("prices", "import", litellm, "--format", "litellm", "--dry-run")
    assert out.startswith(f"prices import {litellm} (litellm): dry run, nothing written\n")
    assert "cards written: 10\n" in out
    assert seeded.query(CARD_SQL) == before
    assert seeded.generation() == gen


# ---- key policies ----

POLICY_SQL = "SELECT service_tiers, server_tools, audio, cache_writes FROM keys WHERE name = ?"


def test_key_policy_flags(seeded):
    seeded.ok("key", "create", "k", "--service-tiers", "default,priority", "--server-tools",
              "priced", "--audio", "deny", "--cache-writes", "allow")
    seeded.ok("key", "create", "plain")
    assert seeded.query(POLICY_SQL, ("k",)) == [("default,priority", "priced", "deny", "allow")]
    assert seeded.query(POLICY_SQL, ("plain",)) == [(None, None, None, None)]

    rows = {k["name"]: k for k in seeded.json("key", "list")}
    assert (rows["k"]["service_tiers"], rows["k"]["server_tools"], rows["k"]["audio"],
            rows["k"]["cache_writes"]) == (["default", "priority"], "priced", "deny", "allow")
    assert (rows["plain"]["service_tiers"], rows["plain"]["server_tools"],
            rows["plain"]["audio"], rows["plain"]["cache_writes"]) == (None, None, None, None)
    lines = seeded.ok("key", "list").splitlines()
    assert [line.split()[8:12] for line in lines] == [
        ["SERVICE_TIERS", "SERVER_TOOLS", "AUDIO", "CACHE_WRITES"],
        ["default,priority", "priced", "deny", "allow"], ["-", "-", "-", "-"]]

    # One at a time; the others, and the limits, stay.
    seeded.ok("key", "set", "k", "--rpm", "5")
    gen = seeded.generation()
    seeded.ok("key", "set", "k", "--audio", "allow")
    assert seeded.generation() > gen
    assert seeded.query(POLICY_SQL, ("k",)) == [("default,priority", "priced", "allow", "allow")]
    gen = seeded.generation()
    seeded.ok("key", "set", "k", "--cache-writes", "deny")
    assert seeded.generation() > gen
    assert seeded.query(POLICY_SQL, ("k",)) == [("default,priority", "priced", "allow", "deny")]
    seeded.ok("key", "set", "k", "--service-tiers", "default")
    assert seeded.query(POLICY_SQL, ("k",)) == [("default", "priced", "allow", "deny")]
    seeded.ok("key", "set", "k", "--server-tools", "inherit", "--audio=inherit")
    assert seeded.query(POLICY_SQL, ("k",)) == [("default", None, None, "deny")]
    seeded.ok("key", "set", "k", "--cache-writes=inherit")
    assert seeded.query(POLICY_SQL, ("k",)) == [("default", None, None, None)]
    seeded.ok("key", "set", "k", "--service-tiers", "")
    assert seeded.query(POLICY_SQL, ("k",)) == [(None, None, None, None)]
    seeded.ok("key", "set", "k", "--service-tiers", "flex,scale_2-x", "--server-tools", "deny",
              "--cache-writes", "priced")
    assert seeded.query(POLICY_SQL, ("k",)) == [("flex,scale_2-x", "deny", None, "priced")]
    seeded.ok("key", "set", "k", "--service-tiers=inherit")
    assert seeded.query(POLICY_SQL, ("k",)) == [(None, "deny", None, "priced")]
    assert limits(seeded, "k")[0] == 5


def test_key_policy_help(ctl):
    """key create and key set name every policy option in their help."""
    for cmd in ("create", "set"):
        out = ctl.ok("key", cmd, "--help")
        for opt in ("--service-tiers", "--server-tools", "--audio P", "--cache-writes P",
                    "--end-users E"):
            assert opt in out, (cmd, opt)


@pytest.mark.parametrize("option, value", [
    ("--service-tiers", "Priority"),
    ("--service-tiers", "default,,flex"),
    ("--service-tiers", ",default"),
    ("--service-tiers", "default,"),
    ("--service-tiers", "default priority"),
    ("--service-tiers", "x" * 65),
    ("--server-tools", "maybe"),
    ("--server-tools", "PRICED"),
    ("--server-tools", ""),
    ("--server-tools", "none"),
    ("--audio", "yes"),
    ("--audio", ""),
    ("--cache-writes", "never"),
    ("--cache-writes", "Deny"),
    ("--cache-writes", ""),
    ("--end-users", "inherit"),
    ("--end-users", "Required"),
    ("--end-users", "none"),
    ("--end-users", ""),
])
def test_key_policy_refused(seeded, option, value):
    seeded.ok("key", "create", "k", "--audio", "deny")
    gen = seeded.generation()
    for args in (["key", "set", "k"], ["key", "create", "new"]):
        r = seeded(*args, f"{option}={value}")
        assert r.returncode == 2, (option, value, r.stderr)
        assert f"invalid value '{value}' for {option}" in r.stderr and r.stdout == ""
    assert seeded.query(POLICY_SQL, ("k",)) == [(None, None, "deny", None)]
    assert seeded.query("SELECT end_users FROM keys") == [("optional",)]
    assert seeded.query("SELECT count(*) FROM keys") == [(1,)]
    assert seeded.generation() == gen


def end_users(ctl):
    """{key name: keys.end_users}"""
    return dict(ctl.query("SELECT name, end_users FROM keys"))


def test_key_end_users(seeded):
    """--end-users optional|required|forbidden: optional when create is not told, kept by
    a set that does not name it, never cleared (it has no inherit); key list shows it."""
    seeded.ok("key", "create", "open")
    seeded.ok("key", "create", "strict", "--end-users", "required", "--audio", "deny")
    seeded.ok("key", "create", "anon", "--end-users=forbidden")
    assert end_users(seeded) == {"open": "optional", "strict": "required", "anon": "forbidden"}
    assert seeded.query(POLICY_SQL, ("strict",)) == [(None, None, "deny", None)]

    rows = {k["name"]: k["end_users"] for k in seeded.json("key", "list")}
    assert rows == {"open": "optional", "strict": "required", "anon": "forbidden"}
    lines = seeded.ok("key", "list").splitlines()
    col = lines[0].split().index("END_USERS")
    assert {line.split()[1]: line.split()[col] for line in lines[1:]} == rows

    gen = seeded.generation()
    assert seeded.ok("key", "set", "open", "--end-users", "forbidden") == "updated key open\n"
    assert seeded.generation() > gen
    seeded.ok("key", "set", "strict", "--rpm", "5", "--audio", "inherit")
    seeded.ok("key", "set", "anon", "--end-users", "optional", "--server-tools", "allow")
    assert end_users(seeded) == {"open": "forbidden", "strict": "required", "anon": "optional"}
    assert seeded.query(POLICY_SQL, ("anon",)) == [(None, "allow", None, None)]
    assert limits(seeded, "strict")[0] == 5

    # An unknown key, a bad option beside it, no value or a wrong spelling: nothing changes.
    gen = seeded.generation()
    r = seeded("key", "set", "nobody", "--end-users", "required")
    assert r.returncode == 1 and "no key named 'nobody'" in r.stderr
    r = seeded("key", "set", "open", "--end-users", "required", "--audio", "maybe")
    assert r.returncode == 2 and "invalid value 'maybe' for --audio" in r.stderr
    r = seeded("key", "set", "open", "--end-users")
    assert r.returncode == 2 and "--end-users needs a value" in r.stderr
    r = seeded("key", "set", "open", "--end-users", "Forbidden")
    assert r.returncode == 2 and r.stderr.startswith(
        "tallyctl: key set: invalid value 'Forbidden' for --end-users: expected optional,"
        " required or forbidden\n")
    assert end_users(seeded)["open"] == "forbidden"
    assert seeded.generation() == gen


# ---- tags of keys and teams, tags' budgets ----

def tags_of(ctl, table, name):
    """The stored tags of key or team name (None: none)."""
    return ctl.query(f"SELECT tags FROM {table} WHERE name = ?", (name,))[0][0]


def listed_tags(ctl, what):
    """{name: tags} as '<what> list' shows them in text and in JSON, which must agree."""
    as_json = {r["name"]: r["tags"] for r in ctl.json(what, "list")}
    lines = ctl.ok(what, "list").splitlines()
    col = lines[0].split().index("TAGS")
    as_text = {line.split()[1]: line.split()[col] for line in lines[1:]}
    assert as_text == {n: ",".join(t) if t else "-" for n, t in as_json.items()}
    return as_json


@pytest.mark.parametrize("what, table, create", [
    ("key", "keys", ("key", "create", "--name")),
    ("team", "teams", ("team", "create")),
])
def test_tags_create_set_clear_list(seeded, what, table, create):
    """--tags is stored as its canonical text (sorted, no spaces), never as typed; a set
    that does not name it keeps it; '' clears it (NULL)."""
    gen = seeded.generation()
    seeded.ok(*create, "a", "--tags", " b=2, a=1")
    seeded.ok(*create, "b", "--rpm", "5")
    seeded.ok(*create, "c", "--tags=")
    assert seeded.generation() > gen
    assert [tags_of(seeded, table, n) for n in "abc"] == ["a=1,b=2", None, None]
    assert listed_tags(seeded, what) == {"a": ["a=1", "b=2"], "b": None, "c": None}

    gen = seeded.generation()
    seeded.ok(what, "set", "b", "--tags", "owner=search,env=prod,url=https://x.example/a@b+c:1")
    assert seeded.generation() > gen
    assert tags_of(seeded, table, "b") == "env=prod,owner=search,url=https://x.example/a@b+c:1"
    seeded.ok(what, "set", "a", "--rpm", "9")
    assert tags_of(seeded, table, "a") == "a=1,b=2"
    seeded.ok(what, "set", "a", "--tags", "z.y_x-w=V:1\t,\tc=3")
    assert tags_of(seeded, table, "a") == "c=3,z.y_x-w=V:1"
    gen = seeded.generation()
    seeded.ok(what, "set", "b", "--tags", "")
    assert seeded.generation() > gen
    assert tags_of(seeded, table, "b") is None
    assert listed_tags(seeded, what) == {"a": ["c=3", "z.y_x-w=V:1"], "b": None, "c": None}


TAGS_MALFORMED = ("tags are name=value separated by commas; a name is [a-z0-9_.-] starting"
                  " with a letter, a value [A-Za-z0-9_.:/@+-]")


@pytest.mark.parametrize("value, message", [
    ("Env=prod", TAGS_MALFORMED),
    ("env=prod,,a=1", TAGS_MALFORMED),
    ("env", TAGS_MALFORMED),
    ("env=", TAGS_MALFORMED),
    ("env=prod;x", TAGS_MALFORMED),
    ("env=a b", TAGS_MALFORMED),
    ("a=1,", TAGS_MALFORMED),
    ("n" * 33 + "=1", "a tag's name is at most 32 bytes and its value at most 64"),
    ("a=" + "v" * 65, "a tag's name is at most 32 bytes and its value at most 64"),
    (",".join(f"t{i}=1" for i in range(9)),
     "at most 8 tags, the key's and team's fixed tags included"),
    ("a=1,b=2,a=1", "a tag's name appears twice"),
])
def test_tags_refused_change_nothing(seeded, value, message):
    seeded.ok("team", "create", "t", "--tags", "env=dev")
    create_key(seeded, "k", "--tags", "env=dev")
    state = lambda: (seeded.query("SELECT * FROM teams ORDER BY id"),
                     seeded.query("SELECT name, tags FROM keys ORDER BY id"),
                     seeded.generation())
    before = state()
    for args in (("key", "create", "k2"), ("key", "set", "k"), ("team", "create", "t2"),
                 ("team", "set", "t")):
        r = seeded(*args, "--tags", value, "--rpm", "5")
        assert r.returncode == 2 and r.stdout == "", (args, r.stderr)
        assert r.stderr.startswith(f"tallyctl: {args[0]} {args[1]}: invalid value '{value}'"
                                   f" for --tags: {message}\n"), r.stderr
        assert state() == before


def tags(prefix, n, value="1"):
    return ",".join(f"{prefix}{i}={value}" for i in range(n))


def too_many(key, team):
    return (f"tallyctl: key '{key}' and its team '{team}' would fix more than 8 tags together:"
            " every request of the key would be refused\n")


@pytest.mark.parametrize("args, key", [
    (("key", "create", "k2", "--team", "t", "--tags", tags("k", 4)), "k2"),
    (("key", "set", "k", "--tags", tags("k", 4)), "k"),
    (("key", "set", "free", "--team", "t"), "free"),
    (("key", "set", "free", "--team", "t", "--tags", tags("t", 2, "x") + "," + tags("k", 4)),
     "free"),
    (("team", "set", "t", "--tags", tags("t", 6)), "k"),
])
def test_tags_with_the_teams_over_8_refused(seeded, args, key):
    """The agent refuses every request of a key whose fixed tags and its team's make more
    than 8 names together (a name of both counts once): no change may make one."""
    seeded.ok("team", "create", "t", "--tags", tags("t", 5))
    create_key(seeded, "k", "--team", "t", "--tags", tags("k", 3))
    create_key(seeded, "free", "--tags", tags("f", 4))
    state = lambda: (seeded.query("SELECT * FROM teams ORDER BY id"),
                     seeded.query("SELECT name, team_id, tags, rpm FROM keys ORDER BY id"),
                     seeded.generation())
    before = state()
    r = seeded(*args, "--rpm", "5")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", too_many(key, "t"))
    assert state() == before


def test_tags_with_the_teams_up_to_8(seeded):
    """8 names together are allowed, a name both fix counting once; a revoked key, which
    makes no requests, does not hold its team back."""
    seeded.ok("team", "create", "t", "--tags", tags("t", 5))
    create_key(seeded, "k", "--team", "t", "--tags", tags("k", 3))
    create_key(seeded, "k2", "--team", "t", "--tags", tags("t", 5, "x") + "," + tags("k", 2))
    create_key(seeded, "old", "--tags", tags("o", 8))
    seeded.ok("key", "revoke", "old")
    seeded.ok("key", "set", "old", "--team", "t")
    seeded.ok("key", "set", "k", "--tags", tags("k", 2) + ",t4=y")
    seeded.ok("team", "set", "t", "--tags", tags("t", 6))
    seeded.ok("key", "create", "free", "--tags", tags("t", 6, "z") + ",f=1,g=1")
    seeded.ok("key", "set", "free", "--team", "t")
    seeded.ok("key", "set", "old", "--tags", tags("o", 8, "2"))
    assert [tags_of(seeded, "keys", n) for n in ("k", "free")] == [
        "k0=1,k1=1,t4=y", "f=1,g=1," + tags("t", 6, "z")]
    assert tags_of(seeded, "teams", "t") == tags("t", 6)


def budgets(ctl):
    """{tag: (budget_micros, budget_period)} as stored."""
    return {t: (b, p) for t, b, p in
            ctl.query("SELECT tag, budget_micros, budget_period FROM tag_budgets")}


def test_tag_budget_set_update_list_delete(ctl):
    gen = ctl.generation() if ctl.exists() else 0
    assert ctl.ok("tag", "set", "env=prod", "--budget-usd", "12.5") == \
        "set budget of tag env=prod\n"
    assert ctl.generation() > gen
    ctl.ok("tag", "set", "feature=search", "--budget-usd=0.000001", "--budget-period", "total")
    assert budgets(ctl) == {"env=prod": (12500000, "month"), "feature=search": (1, "total")}

    # An update changes what it is given, keeps the row (its id and creation).
    row = ctl.query("SELECT id, created_at FROM tag_budgets WHERE tag = 'env=prod'")
    for args, stored in [(("--budget-period", "day"), (12500000, "day")),
                         (("--budget-usd", "3"), (3000000, "day")),
                         (("--budget-usd", "4", "--budget-period", "month"), (4000000, "month"))]:
        gen = ctl.generation()
        ctl.ok("tag", "set", "env=prod", *args)
        assert ctl.generation() > gen, args
        assert budgets(ctl)["env=prod"] == stored, args
    assert ctl.query("SELECT id, created_at FROM tag_budgets WHERE tag = 'env=prod'") == row

    listed = ctl.json("tag", "list")
    assert [{k: v for k, v in b.items() if k != "created_at"} for b in listed] == [
        {"tag": "env=prod", "budget_micros": 4000000, "budget_period": "month",
         "spent_micros": 0},
        {"tag": "feature=search", "budget_micros": 1, "budget_period": "total",
         "spent_micros": 0}]
    assert all(isinstance(b["created_at"], int) for b in listed)
    lines = ctl.ok("tag", "list").splitlines()
    assert lines[0].split() == ["TAG", "BUDGET_USD", "PERIOD", "SPENT_USD", "CREATED"]
    assert [line.split()[:4] for line in lines[1:]] == [["env=prod", "4", "month", "0"],
                                                       ["feature=search", "0.000001", "total",
                                                        "0"]]

    gen = ctl.generation()
    assert ctl.ok("tag", "delete", "env=prod") == "deleted budget of tag env=prod\n"
    assert ctl.generation() > gen
    assert budgets(ctl) == {"feature=search": (1, "total")}
    gen = ctl.generation()
    r = ctl("tag", "delete", "env=prod")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "tallyctl: tag 'env=prod' has no budget (see 'tallyctl tag list')\n"
    # A new budget needs its dollars: a period alone changes an existing one only.
    r = ctl("tag", "set", "env=prod", "--budget-period", "day")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "tallyctl: tag 'env=prod' has no budget: give --budget-usd to set one\n"
    assert budgets(ctl) == {"feature=search": (1, "total")}
    assert ctl.generation() == gen
    ctl.ok("tag", "delete", "feature=search")
    assert ctl.json("tag", "list") == []
    assert ctl.ok("tag", "list").split() == ["TAG", "BUDGET_USD", "PERIOD", "SPENT_USD",
                                             "CREATED"]


@pytest.mark.parametrize("args, message", [
    (["tag", "set", "Env=prod", "--budget-usd", "1"], "invalid tag 'Env=prod': " + TAGS_MALFORMED),
    (["tag", "set", "env=prod,a=1", "--budget-usd", "1"],
     "invalid tag 'env=prod,a=1': expected one tag, name=value, without spaces"),
    (["tag", "set", " env=prod", "--budget-usd", "1"],
     "invalid tag ' env=prod': expected one tag, name=value, without spaces"),
    (["tag", "set", "a=" + "v" * 65, "--budget-usd", "1"], "invalid tag 'a=" + "v" * 65 +
     "': a tag's name is at most 32 bytes and its value at most 64"),
    (["tag", "delete", "env"], "invalid tag 'env': " + TAGS_MALFORMED),
    (["tag", "set", "env=prod"], "nothing to change"),
    (["tag", "set", "env=prod", "--budget-usd", "none"],
     "a tag's budget cannot be none: 'tallyctl tag delete env=prod' removes it"),
    (["tag", "set", "env=prod", "--rpm", "5"], "unknown option '--rpm'"),
    (["tag", "set", "env=prod", "--budget-usd"], "--budget-usd needs a value"),
    (["tag", "set", "--budget-usd", "1"], "missing TAG"),
    (["tag", "delete"], "missing TAG"),
    (["tag", "list", "env=prod"], "unexpected argument 'env=prod'"),
])
def test_tag_budget_refused_changes_nothing(seeded, args, message):
    seeded.ok("tag", "set", "env=prod", "--budget-usd", "2", "--budget-period", "day")
    before = (seeded.query("SELECT * FROM tag_budgets"), seeded.generation())
    r = seeded(*args)
    assert r.returncode == 2 and r.stdout == "", (args, r.stderr)
    assert message in r.stderr and "--help" in r.stderr, r.stderr
    assert (seeded.query("SELECT * FROM tag_budgets"), seeded.generation()) == before


@pytest.mark.parametrize("option, value", [
    ("--budget-usd", "0"), ("--budget-usd", "-1"), ("--budget-usd", "1.0000001"),
    ("--budget-usd", "1e3"), ("--budget-usd", "1000000000.01"), ("--budget-usd", "12."),
    ("--budget-period", "weekly"), ("--budget-period", "Month"), ("--budget-period", "none"),
])
def test_tag_budget_errors_are_the_keys(seeded, option, value):
    """One parser of budgets: a tag's refuses what a key's does, with its message."""
    create_key(seeded, "k")
    seeded.ok("tag", "set", "env=prod", "--budget-usd", "2")
    before = (seeded.query("SELECT * FROM tag_budgets"), seeded.generation())
    r = seeded("tag", "set", "env=prod", f"{option}={value}")
    k = seeded("key", "set", "k", f"{option}={value}")
    assert r.returncode == 2 and k.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr == k.stderr.replace("key set", "tag set"), (r.stderr, k.stderr)
    assert (seeded.query("SELECT * FROM tag_budgets"), seeded.generation()) == before


TAG_DAILY_COLS = ("day, tag, key_id, requests, errors, streams, prompt_tokens, completion_tokens,"
                  " cached_tokens, cache_creation_tokens, reasoning_tokens, cost_micros, unpriced,"
                  " duration_ms_sum, " +
                  ", ".join(f"lat_le_{b}" for b in (25, 50, 100, 200, 350, 500, 750, 1000, 1500,
                                                    2500, 4000, 6000, 10000, 20000, 60000)) +
                  ", lat_gt_60000, estimated_cost_micros")


TAG_TOTAL_COLS = TAG_DAILY_COLS.replace(" key_id,", "")


def add_tag_daily(ctl, day, tag, key_id, cost, estimated):
    """A key's spend on tag on day, added to both tag rollups as the writer adds it."""
    ctl.query(f"INSERT INTO tag_daily ({TAG_DAILY_COLS}) VALUES (?, ?, ?" + ", 0" * 8 +
              ", ?" + ", 0" * 18 + ", ?)", (day, tag, key_id, cost, estimated))
    ctl.query(f"INSERT INTO tag_total_daily ({TAG_TOTAL_COLS}) VALUES (?, ?" + ", 0" * 8 +
              ", ?" + ", 0" * 18 + ", ?) ON CONFLICT (tag, day) DO UPDATE SET cost_micros ="
              " tag_total_daily.cost_micros + excluded.cost_micros, estimated_cost_micros ="
              " tag_total_daily.estimated_cost_micros + excluded.estimated_cost_micros",
              (day, tag, cost, estimated))


def test_tag_list_spent_in_period(seeded):
    """SPENT is the tag's cost (reported and estimated) over every key since the start
    of its budget's period on the UTC calendar: today, this week (from Monday), this
    month, or ever."""
    now = int(time.time())
    day = now - now % 86400
    week = day - (day // 86400 + 3) % 7 * 86400
    month = calendar.timegm(time.gmtime(now)[:2] + (1, 0, 0, 0))
    assert time.gmtime(month)[2:6] == (1, 0, 0, 0) and month <= day
    assert time.gmtime(week).tm_wday == 0 and week <= day
    rows = [(day, 1, 1_000_000, 250_000), (day, 2, 2_000_000, 0),      # today, two keys
            (week, 3, 60_000_000, 0),                                 # this week's Monday
            (week - 86400, 3, 700_000_000, 0),                        # the Sunday before it
            (month, 1, 30_000_000, 5),                                # this month's first day
            (month - 86400, 1, 400_000_000, 0),                       # last month
            (0, 2, 5_000_000_000, 0)]                                 # long ago
    for d, key, cost, est in rows:
        add_tag_daily(seeded, d, "env=prod", key, cost, est)
        add_tag_daily(seeded, d, "env=dev", key, 7, 7)                # another tag's
    spent = lambda since: sum(c + e for d, _, c, e in rows if d >= since)
    expect = {"day": spent(day), "week": spent(week), "month": spent(month),
              "total": spent(0)}
    assert expect["total"] == 6_193_250_005
    seeded.ok("tag", "set", "env=prod", "--budget-usd", "10000")
    seeded.ok("tag", "set", "feature=none", "--budget-usd", "1", "--budget-period", "day")
    for period in ("day", "week", "month", "total"):
        seeded.ok("tag", "set", "env=prod", "--budget-period", period)
        listed = {b["tag"]: b["spent_micros"] for b in seeded.json("tag", "list")}
        assert listed == {"env=prod": expect[period], "feature=none": 0}, period
        lines = seeded.ok("tag", "list").splitlines()
        col = lines[0].split().index("SPENT_USD")
        usd = lambda m: f"{m // 1_000_000}.{m % 1_000_000:06d}".rstrip("0").rstrip(".")
        assert [line.split()[col] for line in lines[1:]] == [usd(expect[period]), "0"], period


# ---- retention, on both stores ----

def test_prune(ctl):
    # The store must exist: prune never creates one.
    r = ctl("prune", "--older-than-days", "30")
    assert r.returncode == 1 and r.stdout == ""
    assert not ctl.exists()
    ctl.ok("provider", "list")
    old_ms = (int(time.time()) - 40 * 86400) * 1000
    new_ms = int(time.time()) * 1000
    rows = [(f"old-{i}", old_ms + i, f"env=old,n={i % 2}") for i in range(25)] + \
        [(f"new-{i}", new_ms, None if i else "env=new,n=0") for i in range(3)]
    ctl.query("INSERT INTO requests (request_id, outcome, usage_source, started_at, tags)"
              " VALUES " + ", ".join(["(?, 'complete', 'response', ?, ?)"] * len(rows)),
              [v for row in rows for v in row])
    tags = "SELECT tag, count(*) FROM request_tags GROUP BY tag ORDER BY tag"
    assert [tuple(t) for t in ctl.query(tags)] == [("env=new", 1), ("env=old", 25),
                                                   ("n=0", 14), ("n=1", 12)]
    out = ctl.ok("prune", "--older-than-days", "30", "--dry-run")
    assert re.fullmatch(r"would prune 25 requests rows started before "
                        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", out), out
    out = ctl.ok("prune", "--older-than-days", "30", "--batch", "10", "--pause-ms", "0")
    assert re.fullmatch(r"pruned 25 requests rows started before \S+ in 3 batches\n", out), out
    assert sorted(r[0] for r in ctl.query("SELECT request_id FROM requests")) == \
        ["new-0", "new-1", "new-2"]
    # the pruned rows' tags go with them (requests' trigger)
    assert [tuple(t) for t in ctl.query(tags)] == [("env=new", 1), ("n=0", 1)]
    assert ctl.ok("prune", "--older-than-days", "30").startswith("pruned 0 requests rows")


def test_prune_keeps_a_zoned_budgets_month(ctl):
    """While a key or team counts its budget in a time zone, prune keeps the rows of the
    last 32 days, whatever --older-than-days says: a zone off the hour begins its month
    inside an hour whose part after the start only the rows hold."""
    ctl.ok("provider", "list")
    now_s = int(time.time())
    rows = [("d40", (now_s - 40 * 86400) * 1000), ("d20", (now_s - 20 * 86400) * 1000),
            ("d0", now_s * 1000)]
    ctl.query("INSERT INTO requests (request_id, outcome, usage_source, started_at) VALUES " +
              ", ".join(["(?, 'complete', 'response', ?)"] * len(rows)),
              [v for row in rows for v in row])
    ctl.ok("team", "create", "ops", "--budget-usd", "5", "--budget-tz", "Asia/Kolkata")
    r = ctl("prune", "--older-than-days", "1")
    assert r.returncode == 0 and r.stdout.startswith("pruned 1 requests rows"), r
    assert "keeping the rows of the last 32 days" in r.stderr
    assert sorted(x[0] for x in ctl.query("SELECT request_id FROM requests")) == ["d0", "d20"]
    ctl.ok("team", "set", "ops", "--budget-tz", "UTC")
    assert ctl.ok("prune", "--older-than-days", "1").startswith("pruned 1 requests rows")


# ---- PostgreSQL only ----

@pytest.fixture
def pg(tmp_path, pg_server, pg_url):
    assert TALLYCTL.exists(), f"build {TALLYCTL} first"
    return Ctl(tmp_path, pg_server, pg_url)


def test_pg_first_command_creates_schema(pg):
    assert not pg.exists()
    out = pg.ok("provider", "list")
    assert out.split() == ["ID", "NAME", "API", "BACKEND", "URL", "CREATED"]
    assert pg.query("SELECT value FROM meta WHERE name = 'schema_version'") == [(SCHEMA,)]
    assert pg.generation() == 0
    assert not pg.secret.exists(), "only key creation needs the secret"
    assert pg.json("key", "list") == []


def test_pg_url_from_env_and_secret_required(pg, tmp_path):
    env = {"TALLY_DB": pg.url}
    r = run(["provider", "set", "p", "--api", "openai", "--backend", "be_p"], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "created provider p\n"
    # No file beside a URL to keep the secret in: it must be named.
    for args in (["key", "create", "k"], ["gateway-secret"]):
        r = run(args, env)
        assert r.returncode == 1 and r.stdout == "", r
        assert "--secret PATH or TALLY_SECRET_FILE" in r.stderr
    assert pg.query("SELECT count(*) FROM keys") == [(0,)]
    secret = tmp_path / "shared.secret"
    r = run(["key", "create", "k"], dict(env, TALLY_SECRET_FILE=str(secret)))
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip()
    assert pg.query("SELECT hash FROM keys WHERE name = 'k'") == \
        [(hmac.new(secret.read_bytes(), key.encode(), hashlib.sha256).digest(),)]
    # The password of a URL is never printed, even when the connection fails.
    bad = pg.url.replace("postgres@", "postgres:hunter2@").rsplit("/", 1)[0] + "/no_such_db"
    r = run(["--db", bad, "key", "list"])
    assert r.returncode == 1 and "hunter2" not in r.stderr and "no_such_db" in r.stderr


def test_pg_backup_refused(pg, tmp_path):
    pg.ok("provider", "list")
    dest = tmp_path / "copy.db"
    r = pg("backup", str(dest))
    assert r.returncode == 1 and r.stdout == ""
    assert "pg_dump" in r.stderr
    assert not dest.exists()


def test_pg_text_in_byte_order_whatever_the_locale(pg_server, tmp_path):
    """Lists order names as SQLite does (bytes), not by the database's collation, here
    ICU's en-US, which puts "a" before "B"."""
    name = f"icu_{tmp_path.name.lower()}"[:40]
    pg_server.query(pg_server.url(), f'CREATE DATABASE "{name}" TEMPLATE template0'
                    " LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'")
    out = {}
    for kind, c in (("pg", Ctl(tmp_path, pg_server, pg_server.url(name))),
                    ("sqlite", Ctl(tmp_path))):
        for p in ("b-prov", "B-prov", "a-prov"):
            c.ok("provider", "set", p, "--api", "openai", "--backend", "be")
        for m in ("b-model", "a-model", "C-model"):
            c.ok("model", "set", m, "--provider", "a-prov", "--input-micros", "1")
        c.ok("key", "create", "k", "--models", "b-model,C-model,a-model")
        out[kind] = [c.json("provider", "list"), c.json("model", "list"),
                     c.json("prices", "list"), c.ok("prices", "list"),
                     [k["models"] for k in c.json("key", "list")]]
    assert [p["name"] for p in out["pg"][0]] == ["B-prov", "a-prov", "b-prov"]
    assert [m["name"] for m in out["pg"][1]] == ["C-model", "a-model", "b-model"]
    assert out["pg"][4] == [["C-model", "a-model", "b-model"]]
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_at")} for r in rows]
    assert strip(out["pg"][0]) == strip(out["sqlite"][0])
    assert strip(out["pg"][1]) == strip(out["sqlite"][1])
    assert out["pg"][2:] == out["sqlite"][2:]


def test_pg_concurrent_key_creates(pg):
    """Two tallyctl creating keys at once on one PostgreSQL store: no write is lost, and
    of two creates of one name the second fails with the usual error."""
    pg.ok("provider", "list")
    create_key(pg, "first")   # the secret file exists before the race

    def worker(prefix, results):
        for i in range(15):
            results.append((f"{prefix}{i}", pg("key", "create", f"{prefix}{i}")))
            results.append((f"shared{i}", pg("key", "create", f"shared{i}")))

    results = {"a": [], "b": []}
    threads = [threading.Thread(target=worker, args=(p, results[p])) for p in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done = results["a"] + results["b"]
    assert len(done) == 60
    for name, r in done:
        if not name.startswith("shared"):
            assert r.returncode == 0, (name, r.stderr)
    for i in range(15):
        rs = [r for name, r in done if name == f"shared{i}"]
        assert sorted(r.returncode for r in rs) == [0, 1], [r.stderr for r in rs]
        loser = next(r for r in rs if r.returncode == 1)
        assert loser.stderr == f"tallyctl: a key named 'shared{i}' already exists\n"
        assert loser.stdout == ""
    names = sorted(k["name"] for k in pg.json("key", "list"))
    assert names == sorted(["first"] + [f"{p}{i}" for p in "ab" for i in range(15)] +
                           [f"shared{i}" for i in range(15)])
    assert pg.query("SELECT count(*) FROM keys") == [(46,)]


def race_open_transaction(pg, sql, params, outcome, *args):
    """Runs tallyctl args while another session holds sql's change uncommitted, and ends
    that session's transaction (outcome: "commit" or "rollback") once tallyctl waits on
    one of its locks. Returns (exit status, stdout, stderr)."""
    import psycopg2
    con = psycopg2.connect(pg.url)
    try:
        con.cursor().execute(sql, params)
        proc = subprocess.Popen(VALGRIND + [str(TALLYCTL), "--db", pg.url, "--secret",
                                str(pg.secret)] + list(args),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 30
            while not pg.query("SELECT 1 FROM pg_locks l JOIN pg_stat_activity a"
                               " ON a.pid = l.pid WHERE NOT l.granted"
                               " AND a.application_name <> 'psql'"):
                assert proc.poll() is None, proc.communicate()
                assert time.time() < deadline, "tallyctl never waited on the open transaction"
                time.sleep(0.05)
            getattr(con, outcome)()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        con.close()
    return proc.returncode, out, err


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_pg_key_create_racing_an_open_insert(pg, outcome):
    """The race made certain: another session has inserted the name, uncommitted, when
    tallyctl looks (it sees none) and inserts (it waits on the unique index). If that
    session commits, tallyctl fails as for any taken name; if it rolls back, the key is
    created."""
    import psycopg2
    pg.ok("provider", "list")
    create_key(pg, "first")
    rc, out, err = race_open_transaction(
        pg, "INSERT INTO keys (name, prefix, hash, created_at)"
        " VALUES ('race', 'tly_xxxxxxxx', %s, 1)", (psycopg2.Binary(b"\1" * 32),), outcome,
        "key", "create", "race")
    if outcome == "commit":
        assert rc == 1 and out == ""
        assert err == "tallyctl: a key named 'race' already exists\n"
        assert pg.query("SELECT prefix FROM keys WHERE name = 'race'") == [("tly_xxxxxxxx",)]
    else:
        assert rc == 0, err
        assert KEY_RE.fullmatch(out.strip()) and err == ""
        assert pg.query("SELECT prefix FROM keys WHERE name = 'race'") == [(out[:12],)]
    assert pg.query("SELECT count(*) FROM keys") == [(2,)]


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_pg_team_delete_racing_a_key_move(pg, outcome):
    """Another session moves a key into the team, uncommitted, when tallyctl counts its
    keys (it sees none) and deletes it (it waits on the team's row). If that session
    commits, the delete is refused as when the key was there first; if it rolls back,
    the team is deleted."""
    pg.ok("team", "create", "t", "--rpm", "5")
    create_key(pg, "k")
    rc, out, err = race_open_transaction(
        pg, "UPDATE keys SET team_id = (SELECT id FROM teams WHERE name = 't')", (), outcome,
        "team", "delete", "t")
    if outcome == "commit":
        assert rc == 1 and out == "", err
        assert err.startswith("tallyctl: cannot delete team 't': 1 key still belongs to it")
        assert key_team(pg, "k") == "t"
    else:
        assert rc == 0 and out == "deleted team t\n", err
        assert pg.query("SELECT count(*) FROM teams") == [(0,)]
        assert key_team(pg, "k") is None


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
@pytest.mark.parametrize("sql, args", [
    ("UPDATE teams SET tags = '" + tags("t", 6) + "'", ("key", "set", "k", "--tags", tags("k", 3))),
    # what a concurrent key set does: its key's tags, then the lock on its team's row
    ("UPDATE keys SET tags = '" + tags("k", 3) + "' WHERE name = 'k';"
     " SELECT 1 FROM teams FOR NO KEY UPDATE", ("team", "set", "t", "--tags", tags("t", 6))),
])
def test_pg_tags_over_8_racing_an_open_change(pg, sql, args, outcome):
    """Another session has changed the team's tags or a key's, uncommitted, so that
    together with tallyctl's change the key would have 9 tags: tallyctl waits for it,
    and is refused if it commits."""
    pg.ok("team", "create", "t", "--tags", tags("t", 5))
    create_key(pg, "k", "--team", "t", "--tags", tags("k", 2))
    rc, out, err = race_open_transaction(pg, sql, (), outcome, *args)
    if outcome == "commit":
        assert (rc, out, err) == (1, "", too_many("k", "t"))
    else:
        assert rc == 0 and err == "", err
    changed = [tags_of(pg, "keys", "k"), tags_of(pg, "teams", "t")].count(args[-1])
    assert changed == (outcome == "rollback")

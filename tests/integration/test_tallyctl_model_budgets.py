"""tallyctl modelbudget (set, list, delete): a key's or a team's budget for one model
(table model_budgets). Like test_tallyctl.py, whose fixtures it uses, every test runs on
a SQLite file and on a fresh PostgreSQL database, with the same expected output."""

import pytest

from test_tallyctl import (create_key, ctl, pg, pytest_generate_tests,  # noqa: F401
                           race_open_transaction, seeded)

ROWS_SQL = ("SELECT coalesce(k.name, t.name), b.model, b.budget_micros, b.budget_period"
            " FROM model_budgets b LEFT JOIN keys k ON k.id = b.key_id"
            " LEFT JOIN teams t ON t.id = b.team_id ORDER BY 1, 2")


@pytest.fixture
def owners(seeded):
    """seeded with the key k and the team t (no keys: it can be deleted)."""
    create_key(seeded, "k")
    seeded.ok("team", "create", "t")
    return seeded


def rows(ctl):
    return [tuple(r) for r in ctl.query(ROWS_SQL)]


def test_set_update_list_delete(owners):
    c = owners
    assert c.ok("modelbudget", "set", "gpt-4o", "--key", "k", "--budget-usd", "12.5") == \
        "set budget of model gpt-4o of key k\n"
    assert rows(c) == [("k", "gpt-4o", 12500000, "month")]
    # A period alone keeps the budget; a budget alone keeps the period.
    c.ok("modelbudget", "set", "gpt-4o", "--key", "k", "--budget-period", "day")
    assert rows(c) == [("k", "gpt-4o", 12500000, "day")]
    c.ok("modelbudget", "set", "gpt-4o", "--key", "k", "--budget-usd", "3")
    assert rows(c) == [("k", "gpt-4o", 3000000, "day")]
    assert c.ok("modelbudget", "set", "gpt-4o-mini", "--team", "t", "--budget-usd", "0.000001",
                "--budget-period", "total") == "set budget of model gpt-4o-mini of team t\n"
    c.ok("modelbudget", "set", "claude-sonnet-4", "--key", "k", "--budget-usd", "1000000000",
         "--budget-period", "week")

    lines = c.ok("modelbudget", "list").splitlines()
    assert lines[0].split() == ["KEY", "TEAM", "MODEL", "BUDGET_USD", "PERIOD", "CREATED"]
    assert [line.split()[:5] for line in lines[1:]] == [
        ["k", "-", "claude-sonnet-4", "1000000000", "week"],
        ["k", "-", "gpt-4o", "3", "day"],
        ["-", "t", "gpt-4o-mini", "0.000001", "total"],
    ]
    js = c.json("modelbudget", "list")
    assert [{m: r[m] for m in ("key", "team", "model", "budget_micros", "budget_period")}
            for r in js] == [
        {"key": "k", "team": None, "model": "claude-sonnet-4", "budget_micros": 10 ** 15,
         "budget_period": "week"},
        {"key": "k", "team": None, "model": "gpt-4o", "budget_micros": 3000000,
         "budget_period": "day"},
        {"key": None, "team": "t", "model": "gpt-4o-mini", "budget_micros": 1,
         "budget_period": "total"},
    ]
    assert all(isinstance(r["created_at"], int) for r in js)
    assert [r["model"] for r in c.json("modelbudget", "list", "--key", "k")] == \
        ["claude-sonnet-4", "gpt-4o"]
    assert [r["model"] for r in c.json("modelbudget", "list", "--team", "t")] == ["gpt-4o-mini"]
    assert c.json("modelbudget", "list", "--key", "nobody") == []

    assert c.ok("modelbudget", "delete", "gpt-4o", "--key", "k") == \
        "deleted budget of model gpt-4o of key k\n"
    r = c("modelbudget", "delete", "gpt-4o", "--key", "k")
    assert r.returncode == 1 and r.stdout == ""
    assert "model gpt-4o of key k has no budget (see 'tallyctl modelbudget list')" in r.stderr
    # The key's budget and the team's for the same model are two rows.
    r = c("modelbudget", "delete", "gpt-4o-mini", "--key", "k")
    assert r.returncode == 1 and "model gpt-4o-mini of key k has no budget" in r.stderr
    c.ok("modelbudget", "delete", "gpt-4o-mini", "--team", "t")
    assert rows(c) == [("k", "claude-sonnet-4", 10 ** 15, "week")]


@pytest.mark.parametrize("args, rc, message", [
    (["set", "ghost", "--key", "k", "--budget-usd", "1"], 1,
     "unknown model 'ghost' (see 'tallyctl model list')"),
    (["set", "gpt-4o", "--key", "ghost", "--budget-usd", "1"], 1,
     "no key named 'ghost' (see 'tallyctl key list')"),
    (["set", "gpt-4o", "--team", "ghost", "--budget-usd", "1"], 1,
     "no team named 'ghost' (see 'tallyctl team list')"),
    (["set", "gpt-4o", "--key", "k", "--team", "t", "--budget-usd", "1"], 2,
     "give the key (--key KEY) or the team (--team TEAM) whose budget this is, one of the two"),
    (["set", "gpt-4o", "--budget-usd", "1"], 2, "one of the two"),
    (["set", "gpt-4o", "--key", "k"], 2,
     "nothing to set: give --budget-usd or --budget-period"),
    (["set", "gpt-4o", "--key", "k", "--budget-usd", "none"], 2,
     "the budget of model gpt-4o of key k cannot be none: 'tallyctl modelbudget delete'"
     " removes it"),
    (["set", "gpt-4o", "--key", "k", "--budget-usd", "0"], 2,
     "invalid value '0' for --budget-usd"),
    (["set", "gpt-4o", "--key", "k", "--budget-usd", "1.0000001"], 2,
     "invalid value '1.0000001' for --budget-usd"),
    (["set", "gpt-4o", "--key", "k", "--budget-usd", "1", "--budget-period", "year"], 2,
     "invalid value 'year' for --budget-period: expected day, week, month or total"),
    (["set", "gpt-4o", "--key", "k", "--budget-period", "day"], 1,
     "model gpt-4o of key k has no budget: give --budget-usd to set one"),
    (["set", "gpt-4o", "--key", "k", "--rpm", "5"], 2, "unknown option '--rpm'"),
    (["set", "--key", "k", "--budget-usd", "1"], 2, "missing MODEL"),
    (["list", "--key", "k", "--team", "t"], 2, "give --key or --team, not both"),
    (["delete", "gpt-4o", "--key", "k", "--team", "t"], 2, "one of the two"),
    (["delete", "gpt-4o"], 2, "one of the two"),
    (["delete", "gpt-4o", "--key", "ghost"], 1, "no key named 'ghost'"),
    (["delete", "gpt-4o", "--team", "ghost"], 1, "no team named 'ghost'"),
    (["delete", "gpt-4o", "--team", "t"], 1, "model gpt-4o of team t has no budget"),
])
def test_errors_change_nothing(owners, args, rc, message):
    owners.ok("modelbudget", "set", "gpt-4o-mini", "--key", "k", "--budget-usd", "2")
    before = owners.generation()
    r = owners("modelbudget", *args)
    assert r.returncode == rc and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith("tallyctl: ") and message in r.stderr, r.stderr
    assert rows(owners) == [("k", "gpt-4o-mini", 2000000, "month")]
    assert owners.generation() == before


def test_team_delete_takes_its_budgets(owners):
    owners.ok("modelbudget", "set", "gpt-4o", "--team", "t", "--budget-usd", "5")
    owners.ok("modelbudget", "set", "gpt-4o", "--key", "k", "--budget-usd", "6")
    owners.ok("team", "delete", "t")
    assert rows(owners) == [("k", "gpt-4o", 6000000, "month")]
    # A team of the same name later is another team, without the old budgets.
    owners.ok("team", "create", "t")
    assert owners.json("modelbudget", "list", "--team", "t") == []


def test_revoked_key_keeps_its_budgets(owners):
    """Keys are never deleted (their rows keep their owner): revoking one keeps its rows."""
    owners.ok("modelbudget", "set", "gpt-4o", "--key", "k", "--budget-usd", "5")
    owners.ok("key", "revoke", "k")
    assert rows(owners) == [("k", "gpt-4o", 5000000, "month")]


def test_changes_bump_config_generation(owners):
    steps = [
        ("set", "gpt-4o", "--key", "k", "--budget-usd", "5"),
        ("set", "gpt-4o", "--key", "k", "--budget-usd", "6"),
        ("set", "gpt-4o", "--key", "k", "--budget-period", "day"),
        ("set", "gpt-4o", "--team", "t", "--budget-usd", "5", "--budget-period", "total"),
        ("delete", "gpt-4o", "--key", "k"),
        ("delete", "gpt-4o", "--team", "t"),
    ]
    last = owners.generation()
    for step in steps:
        owners.ok("modelbudget", *step)
        now = owners.generation()
        assert now > last, step
        last = now
    owners.ok("modelbudget", "list")
    owners.ok("modelbudget", "list", "--json")
    assert owners.generation() == last


def test_help(owners):
    out = owners.ok("modelbudget", "--help")
    for cmd in ("set MODEL --key KEY|--team TEAM", "list [--key KEY|--team TEAM] [--json]",
                "delete MODEL --key KEY|--team TEAM"):
        assert f"tallyctl [OPTIONS] modelbudget {cmd}" in out
    out = owners.ok("modelbudget", "set", "--help")
    assert out.startswith("usage: tallyctl [OPTIONS] modelbudget set MODEL")
    assert "model_budget_exceeded" in out and "team_model_budget_exceeded" in out
    assert "tallyctl [OPTIONS] modelbudget list" in owners.ok("--help")


def test_an_owner_has_at_most_16(owners):
    """The agent lists an owner's budgets in one answer of GET /tally/v1/usage: a 17th
    is refused, an update of one of the 16 and another owner's are not."""
    c = owners
    for i in range(17):
        c.ok("model", "set", f"m{i:02}", "--provider", "openai", "--input-micros", "1")
    for i in range(16):
        c.ok("modelbudget", "set", f"m{i:02}", "--key", "k", "--budget-usd", "1")
    r = c("modelbudget", "set", "m16", "--key", "k", "--budget-usd", "1")
    assert r.returncode == 1 and "a key or a team has at most 16 budgets per model" in r.stderr
    c.ok("modelbudget", "set", "m15", "--key", "k", "--budget-usd", "2")
    c.ok("modelbudget", "set", "m16", "--team", "t", "--budget-usd", "1")
    assert len(rows(c)) == 17


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_pg_the_16th_racing_an_open_set(pg, outcome):
    """Another session adds the key's 16th budget, uncommitted (its trigger holds the
    configuration's generation row): tallyctl adding a 17th waits for it, and is refused
    if it commits."""
    pg.ok("provider", "set", "openai", "--api", "openai", "--backend", "be_openai")
    for i in range(17):
        pg.ok("model", "set", f"m{i:02}", "--provider", "openai", "--input-micros", "1")
    create_key(pg, "k")
    for i in range(15):
        pg.ok("modelbudget", "set", f"m{i:02}", "--key", "k", "--budget-usd", "1")
    sql = ("INSERT INTO model_budgets (key_id, model, created_at, budget_micros, budget_period)"
           " SELECT id, 'm15', 0, 1000000, 'month' FROM keys WHERE name = 'k'")
    rc, out, err = race_open_transaction(pg, sql, (), outcome,
                                         "modelbudget", "set", "m16", "--key", "k",
                                         "--budget-usd", "1")
    if outcome == "commit":
        assert rc == 1 and "a key or a team has at most 16 budgets per model" in err, err
    else:
        assert (rc, err) == (0, ""), err
    assert len(rows(pg)) == 16

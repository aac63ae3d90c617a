"""Relevance of `memoryd search` on planted memories: exact names, description and body
words, typos, word forms, time frames and types; the expected file is in the top 3 for at
least 90 % of the queries (issue 15). Prints recall@1 and recall@3."""

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd.config import Config
from memoryd.discover.finder import memory_dir_at
from memoryd.recall.engine import Engine
from memoryd.recall.query import parse_frame
from tests.conftest import Env

DAY = 86400.0
NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC).timestamp()

# file: (name, description, type, age in days, body)
MEMORIES = {
    "project_deploy_flow.md": ("Deploy flow", "how staging deployments run", "project", 3,
        "Staging deploys go through the release pipeline; prod needs a green build and a "
        "manual approval in the release channel."),
    "feedback_db_tests.md": ("Database tests", "never mock the database in integration tests",
        "feedback", 10, "Use the real postgres container; mocks hid a broken migration."),
    "project_auth_tokens.md": ("Auth tokens", "how session tokens are issued and refreshed",
        "project", 20, "Tokens are JWTs signed with the rotating key; refresh happens at 80% "
        "of the lifetime."),
    "reference_dashboards.md": ("Dashboards", "where the grafana dashboards live", "reference",
        45, "Latency panels for the search service are on the ops board."),
    "user_prefs.md": ("Answer style", "prefers short answers without emojis", "user", 200,
        "Keep replies short and plain; no emojis, no headings for one-paragraph answers."),
    "project_cache_layer.md": ("Cache layer", "redis cache in front of the catalog service",
        "project", 120, "Entries are keyed by tenant and evicted LRU; warmup runs at boot."),
    "feedback_commit_messages.md": ("Commit messages", "write commit subjects in the imperative",
        "feedback", 5, "Short imperative subjects, details in the body, no ticket numbers."),
    "project_payment_retries.md": ("Payment retries", "failed card payments are retried",
        "project", 60, "The retry worker backs off exponentially and gives up after five "
        "attempts, then emails the customer."),
    "reference_runbook.md": ("On-call runbook", "the pager rotation and escalation steps",
        "reference", 30, "Escalate to the platform lead after thirty minutes of a sev1."),
    "project_search_index.md": ("Search indexing", "the product search index is rebuilt nightly",
        "project", 15, "Elasticsearch reindexing runs at 02:00 and swaps the alias when done."),
    "feedback_pr_size.md": ("Small pull requests", "keep pull requests under 400 lines",
        "feedback", 25, "Reviewers asked for smaller changes; split refactors from features."),
    "project_feature_flags.md": ("Feature flags", "flags are managed in LaunchDarkly",
        "project", 8, "Every flag has an owner and an expiry; stale flags are removed monthly."),
    "project_migrations.md": ("Schema migrations", "how database migrations are applied",
        "project", 33, "Alembic migrations run before the deployment; never edit an applied one."),
    "user_timezone.md": ("Timezone", "the user works in CET", "user", 300,
        "Schedule nothing before 9:00 CET; Fridays are for focus work."),
    "reference_api_docs.md": ("API docs", "the public API reference is generated", "reference",
        70, "OpenAPI specs are built from the handlers and published to the docs site."),
    "project_logging.md": ("Logging", "structured logs in JSON", "project", 12,
        "Services log JSON lines with a request id; never log tokens or personal data."),
    "feedback_testing_style.md": ("Test style", "prefer table-driven tests", "feedback", 40,
        "Parametrize cases instead of copying test bodies; one assertion per behaviour."),
    "project_frontend_build.md": ("Frontend build", "vite builds the web client", "project", 95,
        "The web client bundles with vite; source maps are uploaded to the error tracker."),
    "project_ci_pipeline.md": ("CI pipeline", "what runs on every push", "project", 18,
        "Lint, type check, unit tests, then integration tests in parallel shards."),
    "reference_contacts.md": ("Team contacts", "who owns which service", "reference", 150,
        "Billing belongs to the payments team; search belongs to discovery."),
    "project_rate_limits.md": ("Rate limits", "API rate limiting per tenant", "project", 22,
        "Token bucket per tenant, 100 requests per second, bursts of 200."),
    "feedback_naming.md": ("Naming", "use full words in identifiers", "feedback", 50,
        "No abbreviations in public names; acronyms are capitalised like words."),
    "project_backups.md": ("Backups", "nightly database backups to object storage", "project",
        7, "Snapshots are encrypted and kept for 35 days; restores are tested quarterly."),
    "project_email.md": ("Transactional email", "emails go through the mail provider",
        "project", 65, "Templates live in the repo; bounces are tracked by webhook."),
    "project_monorepo.md": ("Monorepo layout", "packages and apps in one repository", "project",
        28, "Apps import packages, never each other; shared configs live at the root."),
}  # fmt: skip

# (query, expected file, filters)
QUERIES: list[tuple[str, str, dict[str, str]]] = [
    # exact names
    ("Deploy flow", "project_deploy_flow.md", {}),
    ("Cache layer", "project_cache_layer.md", {}),
    ("On-call runbook", "reference_runbook.md", {}),
    ("feature_flags", "project_feature_flags.md", {}),
    ("user_timezone.md", "user_timezone.md", {}),
    # description words
    ("grafana", "reference_dashboards.md", {}),
    ("session tokens refreshed", "project_auth_tokens.md", {}),
    ("imperative commit subjects", "feedback_commit_messages.md", {}),
    ("LaunchDarkly", "project_feature_flags.md", {}),
    ("who owns which service", "reference_contacts.md", {}),
    ("rate limiting", "project_rate_limits.md", {}),
    # body words
    ("postgres container", "feedback_db_tests.md", {}),
    ("exponential backoff five attempts", "project_payment_retries.md", {}),
    ("elasticsearch alias", "project_search_index.md", {}),
    ("escalate sev1", "reference_runbook.md", {}),
    ("source maps error tracker", "project_frontend_build.md", {}),
    ("token bucket", "project_rate_limits.md", {}),
    ("encrypted snapshots", "project_backups.md", {}),
    ("bounces webhook", "project_email.md", {}),
    # questions, as an agent asks them
    ("how are deployments approved", "project_deploy_flow.md", {}),
    ("what runs on every push", "project_ci_pipeline.md", {}),
    ("can I log personal data", "project_logging.md", {}),
    ("where do shared configs go", "project_monorepo.md", {}),
    ("abbreviations in names", "feedback_naming.md", {}),
    # typos
    ("deploymnt", "project_deploy_flow.md", {}),
    ("grafanna", "reference_dashboards.md", {}),
    ("migrashions", "project_migrations.md", {}),
    ("elastcsearch", "project_search_index.md", {}),
    ("postgress", "feedback_db_tests.md", {}),
    # plurals and word forms
    ("deploys", "project_deploy_flow.md", {}),
    ("retrying payments", "project_payment_retries.md", {}),
    ("migration", "project_migrations.md", {}),
    ("dashboard", "reference_dashboards.md", {}),
    ("backup", "project_backups.md", {}),
    ("flag", "project_feature_flags.md", {}),
    # time frames and types
    ("database", "project_backups.md", {"timeframe": "recent", "type": "project"}),
    ("database", "project_migrations.md", {"timeframe": "last_quarter", "type": "project"}),
    ("tests", "feedback_db_tests.md", {"type": "feedback", "timeframe": "recent"}),
    ("service", "project_cache_layer.md", {"timeframe": "2026-02"}),
    ("answers", "user_prefs.md", {"type": "user"}),
    ("docs", "reference_api_docs.md", {"type": "reference", "timeframe": "last_quarter"}),
]


@pytest.fixture
def engine(env: Env, tmp_path: Path) -> Engine:
    folder = tmp_path / "mem"
    folder.mkdir()
    for filename, (name, description, type_, age, body) in MEMORIES.items():
        path = folder / filename
        path.write_text(
            f"---\nname: {name}\ndescription: {description}\ntype: {type_}\n---\n\n{body}\n"
        )
        when = NOW - age * DAY
        os.utime(path, (when, when))
    # The stale line is far out: this measures relevance, not the unconfirmed ordering.
    return Engine([memory_dir_at(folder, Config())], env.state, clock=lambda: NOW, stale_after=1e9)


def test_recall_at_3_is_at_least_90_percent(engine: Engine) -> None:
    """≥30 queries of every kind; the expected file is in the top 3 for ≥90 % of them."""
    assert len(QUERIES) >= 30
    engine.refresh()
    at1 = at3 = 0
    misses = []
    for query, expected, filters in QUERIES:
        frame = parse_frame(filters.get("timeframe"), None, NOW)
        hits = engine.search(query, type_=filters.get("type"), frame=frame, limit=3)
        found = [h.row.file for h in hits]
        at1 += found[:1] == [expected]
        at3 += expected in found
        if expected not in found:
            misses.append((query, expected, found))
    print(  # the figures the issue asks to report (pytest -s shows them)
        f"\nrecall@1 = {at1}/{len(QUERIES)} = {at1 / len(QUERIES):.0%}, "
        f"recall@3 = {at3}/{len(QUERIES)} = {at3 / len(QUERIES):.0%}; misses: {misses}"
    )
    assert at3 / len(QUERIES) >= 0.9, misses

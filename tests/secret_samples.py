"""A planted set of secrets and of look-alikes that are none, for tests/test_secrets.py and
bench/bench_secrets.py.

Every value is generated here from a seeded RNG (the same bytes each run), so that no token of
a real provider format sits in the source for a scanner to flag.
"""

import base64
import hashlib
import random
import string
import uuid

_RNG = random.Random(1717)
_ALNUM = string.ascii_letters + string.digits
_UPPER_DIGITS = string.ascii_uppercase + string.digits


def _pick(alphabet: str, n: int) -> str:
    """n characters of the alphabet; of letters and digits, with every class (as real
    generated tokens have, and as the patterns expect)."""
    while True:
        out = "".join(_RNG.choice(alphabet) for _ in range(n))
        has = (any(c.isdigit() for c in out), any(c.isupper() for c in out))
        if alphabet == _UPPER_DIGITS and not all(has):
            continue
        if alphabet == _ALNUM and not (all(has) and any(c.islower() for c in out)):
            continue
        return out


def _b64url(n: int) -> str:
    return _pick(_ALNUM + "-_", n)


def _jwt() -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    body = (
        base64.urlsafe_b64encode(('{"sub":"' + _pick(_ALNUM, 10) + '","iat":1700000000}').encode())
        .decode()
        .rstrip("=")
    )
    return f"{head}.{body}.{_b64url(43)}"


def _pem() -> str:
    rows = "\n".join(base64.b64encode(_RNG.randbytes(48)).decode() for _ in range(4))
    return "-----BEGIN " + "RSA PRIVATE KEY-----\n" + rows + "\n-----END RSA PRIVATE KEY-----"


def _openssh() -> str:
    rows = "\n".join(base64.b64encode(_RNG.randbytes(48)).decode() for _ in range(3))
    return (
        "-----BEGIN " + "OPENSSH PRIVATE KEY-----\n" + rows + "\n-----END OPENSSH PRIVATE KEY-----"
    )


# (kind, the secret's value, the line that holds it: {} stands for the value)
POSITIVES: list[tuple[str, str, str]] = [
    ("private key", _pem(), "The deploy key is:\n{}"),
    ("private key", _openssh(), "Bastion key:\n{}"),
    ("AWS access key id", "AKIA" + _pick(_UPPER_DIGITS, 16), "Use access key {} for the CI user."),
    ("AWS access key id", "ASIA" + _pick(_UPPER_DIGITS, 16), "temporary creds: `{}`"),
    (
        "AWS secret access key",
        _pick(_ALNUM + "/+", 40),
        "aws_secret_access_key = {}",
    ),
    ("GitHub token", "ghp" + "_" + _pick(_ALNUM, 36), "export GH_TOKEN={}"),
    ("GitHub token", "gho" + "_" + _pick(_ALNUM, 36), "the OAuth token {} works for the bot"),
    (
        "GitHub token",
        "github" + "_pat_" + _pick(_ALNUM, 22) + "_" + _pick(_ALNUM, 59),
        "fine-grained PAT: {}",
    ),
    ("GitLab token", "glpat" + "-" + _b64url(20), "GitLab: {}"),
    ("Slack token", "xoxb" + "-" + _pick(string.digits, 12) + "-" + _pick(_ALNUM, 24), "bot {}"),
    ("Slack token", "xoxp" + "-" + _pick(string.digits, 11) + "-" + _pick(_ALNUM, 32), "user {}"),
    (
        "Slack webhook URL",
        "https://hooks.slack.com/services/T"
        + _pick(_UPPER_DIGITS, 8)
        + "/B"
        + _pick(_UPPER_DIGITS, 8)
        + "/"
        + _pick(_ALNUM, 24),
        "alerts go to {}",
    ),
    ("Stripe live key", "sk" + "_live_" + _pick(_ALNUM, 24), "Stripe: {}"),
    # Real OpenAI keys carry T3BlbkFJ ("OpenAI" in base64) mid-way.
    (
        "OpenAI API key",
        "sk-" + _pick(_ALNUM, 20) + "T3Blbk" + "FJ" + _pick(_ALNUM, 20),
        "OPENAI_API_KEY={}",
    ),
    (
        "OpenAI API key",
        "sk-" + "proj-" + _b64url(40) + _pick(_ALNUM, 20) + "T3Blbk" + "FJ" + _pick(_ALNUM, 20),
        "new-style key {} in .env",
    ),
    ("Anthropic API key", "sk-" + "ant-api03-" + _b64url(80), "Claude key {} (rotate it)"),
    ("Google API key", "AIza" + _b64url(35), "maps key {}"),
    ("JSON web token", _jwt(), "a session cookie looked like {} yesterday"),
    (
        "password in a URL",
        "S3cr" + _pick(_ALNUM, 10),
        "DATABASE_URL=postgres://app:{}@db.internal:5432/app",
    ),
    ("secret assignment", _pick(_ALNUM, 20), "password = {}"),
    ("secret assignment", _pick(_ALNUM + "!@#%^&*", 16), 'db_password: "{}"'),
    ("secret assignment", _pick(_ALNUM, 32), "api_key: {}"),
    ("secret assignment", _pick("0123456789abcdef", 40), "client_secret={}"),
    ("secret assignment", _pick(_ALNUM + "-_", 28), '"auth_token": "{}",'),
    # Formats a person pastes as they come, with no `secret =` label memoryd could lean on.
    (
        "AWS secret access key",
        _pick(_ALNUM + "/+", 40),
        "AWS CI user, from the console's credentials CSV: ci-deploy,{}",
    ),
    (
        "AWS secret access key",
        _pick(_ALNUM + "/+", 40),
        "the AWS secret for the backup bucket is {} (read-only)",
    ),
    ("secret assignment", _pick(_ALNUM, 18), "PGPASSWORD={} psql -h db.internal -U app"),
    (
        "Azure account key",
        _pick(_ALNUM + "/+", 86) + "==",
        "DefaultEndpointsProtocol=https;AccountName=appstore;AccountKey={};"
        "EndpointSuffix=core.windows.net",
    ),
    (
        "HTTP authorization header",
        base64.b64encode(("deploy:" + _pick(_ALNUM, 16)).encode()).decode(),
        "curl -H 'Authorization: Basic {}' https://registry.internal/v2/",
    ),
    (
        "HTTP authorization header",
        _b64url(48),
        "call the admin API with `Authorization: Bearer {}`",
    ),
    ("Hugging Face token", "hf" + "_" + _pick(string.ascii_letters, 34), "HF hub login: {}"),
    (
        "Slack token",
        "xapp"
        + "-1-A"
        + _pick(_UPPER_DIGITS, 10)
        + "-"
        + _pick(string.digits, 13)
        + "-"
        + _pick("0123456789abcdef", 64),
        "socket mode app token {}",
    ),
    ("Google OAuth client secret", "GOCSPX" + "-" + _b64url(28), "OAuth client secret {}"),
    (
        "Telegram bot token",
        _pick(string.digits, 10) + ":AA" + _b64url(33),
        "alerts bot: {} (chat 12345)",
    ),
    ("SendGrid API key", "SG" + "." + _b64url(22) + "." + _b64url(43), "mail via {}"),
    (
        "Twilio auth token",
        _pick("0123456789abcdef", 32),
        "Twilio account " + "AC" + _pick("0123456789abcdef", 32) + ", auth token {}",
    ),
    ("password in prose", "Vq7" + _pick(_ALNUM + "#%!", 11), "The staging admin password is {}."),
    ("npm token", "npm" + "_" + _pick(_ALNUM, 36), "publish with {}"),
    ("PyPI token", "pypi" + "-AgEIcHlwaS5vcmc" + _b64url(60), "upload token {}"),
    ("DigitalOcean token", "dop" + "_v1_" + _pick("0123456789abcdef", 64), "doctl auth {}"),
    ("Shopify token", "shpat" + "_" + _pick("0123456789abcdef", 32), "store admin token {}"),
]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# Lines that hold no secret, though they look like one to an entropy check or a loose pattern.
NEGATIVES: list[str] = [
    f'{{"id": "3f9a1c2b7e", "sha256": "{_sha("manifest")}", "reason": "duplicate"}}',
    f"sha256: {_sha('one memory')}",
    f"The file's digest is {_sha('another')} after the fix.",
    f"Fixed in commit {hashlib.sha1(b'commit').hexdigest()} (see PR 4411).",
    f"Reverted {hashlib.sha1(b'other').hexdigest()[:12]} and cherry-picked it again.",
    f"session id {uuid.UUID(int=_RNG.getrandbits(128), version=4)} in the transcript",
    f"request_id: {uuid.UUID(int=_RNG.getrandbits(128), version=4)}",
    "Encoded greeting: "
    + base64.b64encode(b"the quick brown fox jumps over the lazy dog").decode(),
    "payload " + base64.b64encode(b"Remember to run the migrations before deploying.").decode(),
    "password = ${DB_PASSWORD}",
    "api_key: <your-api-key>",
    "token: os.environ['GITHUB_TOKEN']",
    'password: "changeme"',
    "The password reset flow sends a token by mail.",
    "secret_key = settings.SECRET_KEY",
    "api_key = get_api_key_from_vault()",
    "Use scikit: sk-learn-compatible-estimators-only in the pipeline docs.",
    "Run `git log --format=%H` to list hashes.",
    "The access token lifetime is 3600 seconds.",
    "token: xxxxxxxxxxxxxxxx",
    "AKIAIOSFODNN7 is truncated in docs",  # too short for an access key id
    "password: see 1Password item 'staging db'",
    "pass: /etc/app/secret.d/db.pass",
    "eyJ is how every base64url JSON object starts.",
    "Clone with https://github.com/org/repo.git and build.",
    "ghp_ tokens are classic PATs; never paste one here.",
    # Look-alikes of the formats above.
    f"The AWS CLI prints the commit {hashlib.sha1(b'aws').hexdigest()} it was built from.",
    "AWS docs: the secret key is shown once; store it in the vault, not here.",
    "PGPASSWORD=$PG_PASS psql -h db.internal",
    "AccountKey=<storage-account-key> goes in local.settings.json only",
    "Authorization: Basic auth is disabled on the registry; use tokens.",
    "Authorization: Bearer ${API_TOKEN}",
    "Download with hf_hub_download(repo_id, filename) and cache it.",
    "xapp- tokens are for Socket Mode apps.",
    "GOCSPX- prefixes every Google OAuth client secret.",
    "Telegram chat id 123456789:AAA is not a token.",
    "See SG.org for the style guide.",
    "Twilio account SID " + "AC" + hashlib.md5(b"sid").hexdigest() + " (not secret).",
    "The password is rotated every 90 days by the vault.",
    "The password was changed to something longer last week.",
    f"auth token lifetime: see request {uuid.UUID(int=_RNG.getrandbits(128), version=4)}",
    "npm_config_registry points at the mirror.",
]


def planted_text() -> str:
    """Every positive and negative line, one memory body (positives first)."""
    lines = [tpl.format(value) for _, value, tpl in POSITIVES] + NEGATIVES
    return "\n".join(lines) + "\n"

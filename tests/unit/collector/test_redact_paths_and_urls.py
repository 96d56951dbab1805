"""A secret at the end of a path, and what a signed URL grants.

A run of base64 characters that is no blob (a URL's path, a file's: "/api/v2/sessions/",
"/srv/data/archive/") took, at one start, the span in which a secret begins after one of its
"/" or "+", and hid it: a JWT or an AWS key at the end of a path was stored whole, an e-mail
address in a path lost only what followed its first dot ("john" stayed). A signed URL (S3's,
GCS's, CloudFront's, an Azure SAS's or Function's) grants what its signer could until it
expires, and an OAuth redirect's code is worth a token: their signatures and codes were
stored. Every secret is generated at run time from a fixed seed.
"""

from __future__ import annotations

import base64
import json
import random
import string
from typing import Any

import pytest

from collector.processors.redact import Redactor
from tests.records import span_record
from tests.secret_corpus import (
    gen_anthropic_key,
    gen_aws_access_key,
    gen_email,
    gen_github_token,
    gen_jwt,
    gen_openai_key,
)
from tests.secretgen import PROVIDER_GENERATORS, secret_part
from tests.source_modules import source_module

KEY = b"unit-test-paths-key"
_ALNUM = string.ascii_letters + string.digits


def _redacted(redactor: Any, text: str) -> tuple[str, list[str]]:
    record = span_record(span_attributes={"note": text})
    redactor([record])
    rules = [e.rsplit(":", 1)[1].removesuffix("+verified") for e in record.redactions]
    return record.span_attributes["note"], rules


def _placements(text: str) -> list[str]:
    """The text alone, inside a sentence, and as a tool message's content in JSON."""
    return [
        text,
        f"the tool fetched {text} (200 OK)",
        json.dumps({"role": "tool", "content": text}),
    ]


# Runs of base64 characters (31 or more) that end where a secret begins.
_PATHS = {
    "url_path": "GET https://files.example.com/api/v2/tenants/acme/objects/",
    "first_part": "GET /",  # (then "/objects/...": the secret opens the run)
    "file_path": "open /srv/data/archive/2024/reports/quarterly/",
    "after_plus": "q=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4+",
    "base64_then_slash": "blob Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4/",
}


def _core_secrets() -> dict[str, tuple[str, str]]:
    """kind -> (the text placed after a path, the part never stored)."""
    rng = random.Random(20261206)
    found: dict[str, tuple[str, str]] = {}
    for kind, generate in {
        "jwt": gen_jwt,
        "aws_access_key": gen_aws_access_key,
        "anthropic_key": gen_anthropic_key,
        "openai_key": gen_openai_key,
        "github_token": gen_github_token,
        "email": gen_email,
    }.items():
        text = generate(rng).text
        found[kind] = (text, text)
    # An OIDC token of 2 KB: its second "." is far past the run.
    header = (
        base64.urlsafe_b64encode(b'{"alg":"RS256","typ":"JWT","kid":"k1"}').decode().rstrip("=")
    )
    claims = {"sub": "u1", "groups": ["g" + str(i) for i in range(200)]}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    signature = base64.urlsafe_b64encode(rng.randbytes(256)).decode().rstrip("=")
    found["long_jwt"] = (f"{header}.{payload}.{signature}",) * 2
    return found


_CORE = _core_secrets()


@pytest.mark.parametrize("kind", sorted(_CORE))
@pytest.mark.parametrize("path", sorted(_PATHS))
@pytest.mark.parametrize("engine", [0, 1])
def test_a_secret_at_the_end_of_a_path_is_replaced(kind: str, path: str, engine: int) -> None:
    """Each kind after each run, in each placement, by either engine: the secret is
    replaced and the path before it stays as it was."""
    if (kind, path) == ("email", "first_part"):
        pytest.skip("an address that opens the path is its whole: '/john@x.com/objects/...'")
    if (kind, path) == ("email", "after_plus"):
        pytest.skip("a '+' is part of an address: 'Zm9v...+john@example.com' is one")
    redactor = Redactor(KEY)
    redactor.forced_engine = engine
    text, secret = _CORE[kind]
    after = "/objects/some/long/path/segments/here done" if path == "first_part" else " done"
    for placement in _placements(_PATHS[path] + text + after):
        stored, rules = _redacted(redactor, placement)
        assert secret not in stored, (placement, stored)
        assert _PATHS[path].split()[-1] in stored or json.dumps(_PATHS[path])[1:-1] in stored
        assert rules == [kind.removeprefix("long_")], (placement, rules)
    if kind == "email":  # the address's first part, before its first dot, went with it
        local = text.split("@")[0].split(".")[0]
        stored, _ = _redacted(redactor, _PATHS[path] + text)
        assert not stored.endswith(local + "<"), stored


@pytest.mark.parametrize("name", sorted(PROVIDER_GENERATORS))
def test_every_provider_credential_at_the_end_of_a_path_is_replaced(name: str) -> None:
    """Each provider's generated credential at the end of a URL's path and of a file's."""
    redactor = Redactor(KEY)
    credential = PROVIDER_GENERATORS[name](random.Random(name))
    secret = secret_part(name, credential)
    for path in ("url_path", "file_path"):
        text = _PATHS[path] + credential + " done"
        stored, rules = _redacted(redactor, text)
        assert secret not in stored, (text, stored)
        assert rules, text


@pytest.mark.parametrize("seed", range(40))
def test_paths_and_base64_runs_stay_and_hide_nothing_else(seed: int) -> None:
    """Paths, base64 of random bytes (a "/" or "+" in every few characters) and a data URL
    around an e-mail address: only the address is replaced; the runs are looked at again and
    nothing in them is taken for a secret."""
    rng = random.Random(seed)
    blob = base64.b64encode(rng.randbytes(600)).decode()
    email = gen_email(rng).text
    path = "/".join("".join(rng.choice(_ALNUM) for _ in range(rng.randint(3, 9))) for _ in range(8))
    text = f"GET /{path} then data:image/png;base64,{blob} from {email} via /srv/{path}/index"
    redactor = Redactor(KEY)
    for engine in (0, 1):
        redactor.forced_engine = engine
        stored, rules = _redacted(redactor, text)
        assert rules == ["email"], (seed, rules)
        head, _, tail = text.partition(email)
        assert stored.startswith(head + "<email:") and stored.endswith(tail), stored


def _luhn_valid_id(rng: random.Random, length: int) -> str:
    """Digits of ``length`` that pass the Luhn check, as one in ten ids does."""
    while True:
        digits = str(rng.randint(1, 9)) + "".join(
            rng.choice(string.digits) for _ in range(length - 1)
        )
        total = sum(
            d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2)
            for i, d in enumerate(int(c) for c in reversed(digits))
        )
        if total % 10 == 0:
            return digits


@pytest.mark.parametrize("seed", range(10))
def test_ids_in_a_long_path_stay_even_when_they_pass_a_cards_check(seed: int) -> None:
    """Digits between two "/" of a path are an id (Asana's tasks, Discord's channels, a
    post's), not a card or a phone, whatever their checksum: looking again at a path finds
    no number in it."""
    rng = random.Random(seed)
    task, channel = _luhn_valid_id(rng, 16), _luhn_valid_id(rng, 18)
    for text in (
        f"see https://app.asana.com/0/1204567890123456/{task} and https://discord.com/"
        f"channels/123456789012345678/{channel} (owner {gen_email(rng).text})",
    ):
        stored, rules = _redacted(Redactor(KEY), text)
        assert rules == ["email"], (text, rules)
        assert task in stored and channel in stored


def test_a_path_is_looked_at_again_once_at_each_of_its_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A text of many paths beside an e-mail address: each path is looked at again once,
    by the other detectors, matched at the start of each part after a "/" long enough for
    a token and of the last (a text of paths must not cost a match per part, and a secret
    that runs on far past its path is matched whole)."""
    calls: list[tuple[list[int], frozenset[str]]] = []
    source = source_module("collector.processors.redact")
    at = source._at

    def recording(matcher: Any, view: bytes, starts: list[int], run_end: int) -> Any:
        calls.append((list(starts), frozenset(matcher.value_groups)))
        return at(matcher, view, starts, run_end)

    monkeypatch.setattr(source, "_at", recording)
    email = gen_email(random.Random(7)).text
    segment = "/srv/data/archive/2024/reports/quarterly/summary "
    text = f"owner {email} " + segment * 200
    stored, rules = _redacted(source.Redactor(KEY), text)
    assert rules == ["email"] and stored.endswith(segment * 200)
    assert len(calls) == 200
    assert all(detectors == {"email"} for _, detectors in calls)
    offset = len(f"owner {email} ".encode())
    # Only "quarterly" (long enough for a token) and "summary" (the last part, which may
    # run on past the path): "srv", "data", "archive", "2024" and "reports" hold none.
    parts = [segment.index("quarterly"), segment.index("summary")]
    for index, (starts, _) in enumerate(sorted(calls)):
        assert starts == [offset + index * len(segment) + part for part in parts]
    # A run of 500 one-letter parts: its last part only.
    calls.clear()
    stored, rules = _redacted(source.Redactor(KEY), f"owner {email} " + ("/a" * 500 + " ") * 20)
    assert rules == ["email"] and len(calls) == 20
    assert all(len(starts) == 1 for starts, _ in calls)


def _zero_runs(rng: random.Random, size: int) -> bytes:
    """Binary with runs of zero bytes (a bitmap, a padded struct): "AAAA..." in base64."""
    out = bytearray()
    while len(out) < size:
        out += rng.randbytes(rng.randint(3, 120)) + bytes(rng.randint(15, 80))
    return bytes(out[:size])


def _pcm(rng: random.Random, size: int) -> bytes:
    """16-bit audio samples of a slow wave, with noise."""
    return b"".join(
        (3000 * ((i % 50) - 25) // 25 + rng.randint(-40, 40)).to_bytes(2, "little", signed=True)
        for i in range(size // 2)
    )


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("payload", ["random", "zero_runs", "pcm", "int32"])
def test_base64_payloads_are_not_taken_apart(seed: int, payload: str) -> None:
    """Base64 of binary (an image, audio, an array) in a data URL, as a JSON value (an audio
    input's data) and in text, beside an e-mail address: only the address is replaced.
    Looking again inside such runs took their random letters between two "/" or "+" for
    tokens ("/AAAAAAAAAAAAAAAAAAAA..." of zero bytes as X's bearer token, "+ATBB...")."""
    rng = random.Random(f"{payload}:{seed}")
    size = rng.choice([60, 200, 700, 3000, 20000])
    raw = {
        "random": lambda: rng.randbytes(size),
        "zero_runs": lambda: _zero_runs(rng, size),
        "pcm": lambda: _pcm(rng, size),
        "int32": lambda: b"".join(
            rng.randint(0, 5000).to_bytes(4, "little") for _ in range(size // 4)
        ),
    }[payload]()
    blob = base64.b64encode(raw).decode()
    email = gen_email(rng).text
    redactor = Redactor(KEY)
    for text in (
        f"data:audio/wav;base64,{blob} from {email}",
        json.dumps({"input_audio": {"data": blob, "format": "wav"}, "owner": email}),
        f"payload {blob} end, owner {email}",
    ):
        stored, rules = _redacted(redactor, text)
        assert rules == ["email"], (payload, seed, rules)
        assert blob in stored


@pytest.mark.parametrize(
    "text",
    [
        "open('live_recording-2024-05-01-Team-Standup-Meeting-Notes.mp4')",
        "live_demo_2024_Q3_Quarterly_Business_Review_Final_v2.pptx",
        "class live_Widget_Container_Responsive_Layout_2024_v2",
        "https://news.example.com/us/pa-Senate-Passes-HB1234-Budget-Bill-2024-after-Long-Debate",
        "cp pa-Report-2024-Q1-Final-Version-Approved-By-Board.xlsx",
        "from jina_reranker_v2_base_multilingual_model_weights_final import x",
        "jina_embeddings_v2_base_en_model_checkpoint_files_2024",
        "tfp_distributions_MultivariateNormalTriL_scale_2024_layer",
        "shltm_shipment_tracking_milestones_2024_report_v2",
        "BBDC-Repository-Permissions-Migration-Script-2024-v2",
        "salad_cloud_v2_configurationForTheDeploymentPipeline",
        "ory_at_ThisIsAVeryLongIdentifierName2024X",
        "rnd_UniformRandomNumberGenerator32Bit",
        "fw_UpdateFirmwareImageOnDevice2",
        "re_search_AllMatchesInTheDocument1",
        "NF-PROCESSINGQUEUE2024NOVEMBERBATCH01",
        # Technical words, whose letter pairs prose has few of (sql, json, oauth, k8s).
        "live_postgresql_connection_pool_settings_v2",
        "fw_GrafanaDatasourceHandler2",
        "pa-kubernetes-cluster-autoscaler-config-2024-v2",
        "salad_cloud_v2_JsonSchemaValidatorStrict",
        "rnd_OauthCallbackHandlerForLogin",
        "NF-KubernetesNodePoolAutoscaler2",
        "re_search_JsonSchemaValidatorStrict1",
        "ory_at_SqliteBackupJobForTheNightlyRun",
        # Short words without a vowel (Mcp, Http, Gcp, Sql), which agents' names are full of.
        "NF-RealtimeMcpApprovalRequestParam",
        "fw_SyncHttpClientWrapper2024",
        "rnd_GcpApphubDestinationWorkload",
        "live_McpToolApprovalFilterAlwaysRequiredNow",
        "pa-sql-query-builder-for-the-analytics-warehouse",
        # Octopus' API-<26 capitals and digits>, spelled as words, with few digits or none.
        "API-REFERENCEDOCUMENTATIONINDEX",
        "API-DEPLOYMENTPIPELINESTAGE2",
    ],
)
def test_names_that_open_with_a_providers_prefix_stay(text: str) -> None:
    """Files, classes, modules and slugs whose first word is a short prefix of a provider
    (GoCardless' live_, Voyage's pa-, Jina's jina_, Typeform's tfp_, TensorFlow Probability's
    alias): their words are a name, not a generated token."""
    redactor = Redactor(KEY)
    for placement in _placements(text):
        stored, rules = _redacted(redactor, placement)
        assert rules == [] and stored == placement, (placement, rules)


# --- signed URLs and OAuth codes ---------------------------------------------------------
def _signature(rng: random.Random, alphabet: str = _ALNUM, count: int = 43) -> str:
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(count))
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            return value


def _signed_urls() -> dict[str, tuple[str, str, str]]:
    """name -> (URL, the part never stored, a part that stays)."""
    rng = random.Random(46)
    hexsig = _signature(rng, "0123456789abcdef", 64)
    goog = _signature(rng, "0123456789abcdef", 256)
    cloudfront = _signature(rng, _ALNUM + "~-_", 60)
    sas = _signature(rng) + "%2B" + _signature(rng, count=8) + "%3D"
    code = "4/0A" + _signature(rng, _ALNUM + "-_", 70)
    function = _signature(rng, count=54) + "=="
    return {
        "s3": (
            "https://bucket.s3.amazonaws.com/report.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Date=20261206T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
            f"&X-Amz-Signature={hexsig}",
            hexsig,
            "X-Amz-Expires=3600",
        ),
        "gcs": (
            "https://storage.googleapis.com/bucket/o.csv?X-Goog-Algorithm=GOOG4-RSA-SHA256"
            f"&X-Goog-Expires=900&X-Goog-Signature={goog}&x-id=GetObject",
            goog,
            "x-id=GetObject",
        ),
        "cloudfront": (
            f"https://d111.cloudfront.net/v.mp4?Expires=1798761600&Signature={cloudfront}"
            "&Key-Pair-Id=K2JCJMDEHXQW5F",
            cloudfront,
            "Key-Pair-Id=K2JCJMDEHXQW5F",
        ),
        "logic_app": (
            "https://prod-12.westus.logic.azure.com:443/workflows/0123abcd/triggers/manual/"
            f"paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={sas}",
            sas,
            "api-version=2016-06-01",
        ),
        "oauth_code": (
            f"https://app.example.com/oauth/callback?code={code}&state=af0ifjsldkj",
            code,
            "state=af0ifjsldkj",
        ),
        "azure_function": (
            f"https://fn.azurewebsites.net/api/HttpTrigger?code={function}",
            function,
            "/api/HttpTrigger",
        ),
        "url_query_attribute": (f"sig={sas}&sv=1.0", sas, "sv=1.0"),
        "implicit_flow_fragment": (
            f"https://app.example.com/cb#code={code}&state=xyz",
            code,
            "state=xyz",
        ),
        "matrix_parameter": (
            f"https://cdn.example.com/v.mp4;Signature={cloudfront}",
            cloudfront,
            "v.mp4",
        ),
        "sig_opening_with_a_slash": (
            f"https://x.blob.core.windows.net/c/b?sv=1.0&sig=/{sas}",
            sas,
            "sv=1.0",
        ),
        "sig_opening_with_an_escaped_slash": (
            f"https://x.blob.core.windows.net/c/b?sv=1.0&sig=%2F{sas}",
            sas,
            "sv=1.0",
        ),
    }


_SIGNED = _signed_urls()


@pytest.mark.parametrize("name", sorted(_SIGNED))
@pytest.mark.parametrize("engine", [0, 1])
def test_a_signed_urls_signature_and_an_oauth_code_are_replaced(name: str, engine: int) -> None:
    redactor = Redactor(KEY)
    redactor.forced_engine = engine
    url, secret, kept = _SIGNED[name]
    placements = _placements(url)
    if name == "url_query_attribute":  # a query alone (OTel's url.query): not in prose
        placements = [placements[0], placements[2]]
    for placement in placements:
        stored, rules = _redacted(redactor, placement)
        assert secret not in stored and secret[:12] not in stored, (placement, stored)
        assert kept in stored, stored
        assert rules == ["url_signature"], rules


@pytest.mark.parametrize(
    "text",
    [
        "https://shop.example.com/checkout?code=US&lang=en",
        "https://example.com/run?code=print_hello_world_function",
        "https://example.com/promo?code=SUMMERSALE2026",  # one class: a word and digits
        "https://example.com/status?code=200&signature=pending",
        "the signature=3f1a9c2b7d4e5f60718293a4b5c6d7e8 of the payload",  # not in a URL
        "https://example.com/docs?sig=/usr/share/doc/signatures/readme",
        "https://api.example.com/v1/codes?code=ABCDEFGHIJKLMNOPQRSTUVWX",
    ],
)
def test_query_parameters_that_hold_no_signature_stay(text: str) -> None:
    redactor = Redactor(KEY)
    for placement in _placements(text):
        stored, rules = _redacted(redactor, placement)
        assert rules == [], (placement, rules)
        assert stored == placement


@pytest.mark.parametrize(
    "text",
    [
        "log.info('session_id=%s.%s.%s', a, b, c)",
        "printf 'token=%08d-%08x' 12 34",
        "set AUTH_TOKEN=%GHTOKEN%",
        "https://example.com/cb?access_token=%7B%7Btoken%7D%7D",
        "https://example.com/cb?token=%3Ctoken%3E",
    ],
)
def test_format_strings_and_escaped_placeholders_under_a_token_key_stay(text: str) -> None:
    """A "%" in a token's value is an escape: a format ("%s", "%08d", "%VAR%") or an
    escaped placeholder ("{{token}}", "<token>") is no token."""
    stored, rules = _redacted(Redactor(KEY), text)
    assert rules == [] and stored == text, (text, stored)


@pytest.mark.parametrize("key", ["X-Amz-Security-Token", "access_token", "id_token", "sid"])
def test_a_percent_encoded_token_in_a_query_is_replaced_whole(key: str) -> None:
    """The value of a token key holds its percent-encoded characters ("%2F%2F...wEaC"): the
    part after the first escape was stored."""
    rng = random.Random(key)
    value = "IQoJ" + "%2F".join(_signature(rng, count=12) for _ in range(5)) + "%3D"
    url = f"https://bucket.s3.amazonaws.com/o?{key}={value}&X-Amz-Expires=60"
    for placement in _placements(url):
        stored, _ = _redacted(Redactor(KEY), placement)
        assert not any(part in stored for part in value.split("%")[1:] if len(part) > 4), stored
        assert "X-Amz-Expires=60" in stored


# --- passwords given to commands ---------------------------------------------------------
# A coding agent's shell commands, a runbook in a tool result: "{}" is the secret.
_COMMANDS = [
    "mysql -u root -p{} -h db.internal shop",
    "mysqldump --single-transaction -uroot -p{} shop > shop.sql",
    "sshpass -p {} ssh deploy@10.0.0.5",
    "docker login -u bob -p {} registry.example.com",
    "podman login --username bob -p {} quay.io",
    "az login --service-principal -u http://ci-app -p {} --tenant 72f988bf",
    "redis-cli -h cache.internal -a {} ping",
    "sqlcmd -S db -U sa -P {} -Q 'select 1'",
    "ldapsearch -x -D cn=admin,dc=example,dc=com -w {} -b dc=example,dc=com",
    "zip -P {} backup.zip data.csv",
    "7z a -p{} backup.7z data",
    "openssl pkcs12 -export -in c.pem -passout pass:{} -out c.p12",
    "keytool -importcert -file ca.crt -keystore t.jks -storepass {}",
    "deploy-tool --password {} --verbose",
    "gh-helper --api-key {} --org acme",
    "vault-sync --client-secret {} --tenant t",
    "machine api.example.com login bob@example.com password {}",
    "machine api.example.com\n  login bob@example.com\n  password {}",  # .netrc, Heroku's layout
    "tool --authToken {} --org acme",
    "az storage blob list --account-key {} --account-name acme",
    "cargo login {}",
    "htpasswd -b /etc/nginx/.htpasswd bob {}",
    "ssh-keygen -t ed25519 -N {} -f deploy_key",
    "aws configure set aws_secret_access_key {}",
    "gh secret set DEPLOY_KEY --body {}",
    "doctl auth init -t {}",
    "sqlplus scott/{}@orcl",
    "$pw = ConvertTo-SecureString {} -AsPlainText -Force",
    "mysql -u root -p{}&&echo done",
    "tool --password {}|tee out.log",
]


def _command_secret(rng: random.Random) -> str:
    return rng.choice(string.ascii_letters) + _signature(rng, _ALNUM + "!#%^*@", 13)


@pytest.mark.parametrize("command", _COMMANDS)
@pytest.mark.parametrize("quote", ["", "'", '"'])
def test_a_password_given_to_a_command_is_replaced(command: str, quote: str) -> None:
    """Each command form, its value bare or quoted, in each placement: the value is
    replaced and the command around it stays."""
    if quote and command.endswith(("&&echo done", "|tee out.log", "@orcl")):
        pytest.skip("the unquoted value's end is what these test")
    secret = _command_secret(random.Random(command))
    text = command.format(quote + secret + quote)
    head, tail = command.split("{}")
    for placement in _placements(text):
        stored, rules = _redacted(Redactor(KEY), placement)
        assert secret not in stored, (placement, stored)
        assert head in stored or json.dumps(head)[1:-1] in stored, stored
        assert tail in stored or json.dumps(tail)[1:-1] in stored, stored  # (not swallowed)
        assert "cli_password" in rules, rules


@pytest.mark.parametrize(
    "arguments",
    [
        ["deploy-tool", "--password", "{}", "--verbose"],
        ["docker", "login", "-u", "bob", "--password", "{}", "ghcr.io"],
        ["gh-helper", "--api-key", "{}"],
        ["tool", "--authToken", "{}"],
    ],
)
def test_a_password_in_an_argument_list_is_replaced(arguments: list[str]) -> None:
    """A command as a tool call sends it, a JSON list of arguments (each one its own string
    once parsed), and the same list as Python prints it: the argument after the flag."""
    secret = _command_secret(random.Random(str(arguments)))
    argv = [secret if a == "{}" else a for a in arguments]
    for text in (json.dumps({"command": argv}), json.dumps(argv), repr(argv)):
        stored, rules = _redacted(Redactor(KEY), text)
        assert secret not in stored, (text, stored)
        assert rules == ["cli_password"], rules
        assert all(a in stored for a in argv if a != secret)


@pytest.mark.parametrize(
    "text",
    [
        "mysql -u root -p shop",  # -p alone: mysql asks for the password
        "docker run -p 8080:80 nginx",
        "ssh -p 2222 deploy@host",
        "mkdir -p build/out",
        "unzip -p archive.zip notes.txt",
        "echo $PW | docker login -u bob --password-stdin registry.example.com",
        "deploy-tool --password $DEPLOY_PASSWORD --verbose",
        "deploy-tool --token ${GITHUB_TOKEN}",
        "deploy-tool --password <password>",
        "ansible-playbook --private-key ~/.ssh/id_ed25519 site.yml",
        "openssl rsa -passin env:KEY_PASS -in key.pem",
        "openssl rsa -passin file:/run/secrets/pass -in key.pem",
        "llm --max-tokens 512 --temperature 0.2",
        "kubectl create secret generic db --from-file=./creds",
        "pytest --pass-with-no-tests -q",
        "curl -u http://localhost:8080/health",
        "deploy-tool --token --verbose",
        # The review's: "login" elsewhere on a docker line, placeholders in code, help and
        # prose, switches and flags that take no secret, a file, a grep for "mysql".
        "docker run -d --name login-api -p 3000:3000 myorg/login-api",
        "podman run -v ./login:/app -p 8443:8443 img",
        'cmd = f"tool --token {token} --verbose"',
        'cmd = f"mysql -u{user} -p{password} {db}"',
        'cmd = f"docker login -u {user} -p {password} ghcr.io"',
        'cmd = "--api-key #{api_key}"',
        "program.option('--api-key [key]', 'the key')",
        "tool --token `cat ~/.tok`",
        "openssl enc -aes256 -pass pass:$KEY -in f",
        "  --token TOKEN      the API token to use",
        "  --password string   the password",
        "Use the --token flag or set GH_TOKEN.",
        "Pass --api-key when calling the API.",
        "ansible-playbook --ask-become-pass site.yml",
        "adduser --disabled-password appuser",
        "docker build --secret id=npm,src=$HOME/.npmrc .",
        "aws s3api list-objects --starting-token abc123def",
        "python train.py --pad-token '[PAD]' --eos-token eos",
        "ssh-add --private-key id_ed25519",
        "openvpn --auth-user-pass auth.txt",
        "az ad sp create --client-secret @secret.json",
        "tool --token null",
        'grep -rn "mysql" src/ -print',
    ],
)
def test_commands_that_give_no_password_stay(text: str) -> None:
    redactor = Redactor(KEY)
    for placement in _placements(text):
        stored, rules = _redacted(redactor, placement)
        assert rules == [], (placement, rules)
        assert stored == placement


def test_second_looks_at_turned_down_spans_read_a_few_times_the_text_in_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Text dense with turned-down matches ("sid=123456789 " x 15,000: digits, no token)
    beside an address: each turned-down span is looked at again up to a budget of a few
    times the text's length in all, so such text costs a few times its length, not its
    length for each span; the address is still found."""
    calls: list[int] = []
    source = source_module("collector.processors.redact")
    within = source._within

    def recording(matcher: Any, view: bytes, start: int, end: int) -> Any:
        calls.append(end - start)
        return within(matcher, view, start, end)

    monkeypatch.setattr(source, "_within", recording)
    email = gen_email(random.Random(11)).text
    text = f"owner {email} " + "sid=123456789 " * 15_000
    stored, rules = _redacted(source.Redactor(KEY), text)
    assert email not in stored and rules == ["email"]
    read = sum(span + source._LOOK_PAST for span in calls)
    assert 100 < len(calls) < 15_000
    assert read <= source._LOOK_BUDGET * len(text) + 5 * source._LOOK_PAST

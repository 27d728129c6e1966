"""Schemathesis over the served /openapi.json: every operation gets generated requests (schema-valid bodies, and
schema-violating ones where there is a body), bounded and derandomized. No answer may be a 5xx, a JSON answer
must parse, an event stream must carry JSON events without an internal error, and every answer must be one the
document declares (status, content type, and the error shapes)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import APIOperation, Case, GenerationMode
from scripted_engine import ScriptedEngine
from server_live import MODEL, live_server
from server_scripts import SCRIPTS

OPERATIONS = [
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/responses",
    "GET /v1/responses/{response_id}",
    "DELETE /v1/responses/{response_id}",
    "POST /v1/responses/{response_id}/cancel",
    "GET /v1/responses/{response_id}/input_items",
    "POST /v1/responses/input_tokens",
    "POST /v1/responses/compact",
    "POST /v1/conversations",
    "GET /v1/conversations/{conv_id}",
    "POST /v1/conversations/{conv_id}",
    "DELETE /v1/conversations/{conv_id}",
    "GET /v1/conversations/{conv_id}/items",
    "POST /v1/conversations/{conv_id}/items",
    "GET /v1/conversations/{conv_id}/items/{item_id}",
    "DELETE /v1/conversations/{conv_id}/items/{item_id}",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "POST /v1/messages/batches",
    "GET /v1/messages/batches",
    "GET /v1/messages/batches/{batch_id}",
    "POST /v1/messages/batches/{batch_id}/cancel",
    "DELETE /v1/messages/batches/{batch_id}",
    "GET /v1/messages/batches/{batch_id}/results",
    "POST /v1/files",
    "GET /v1/files",
    "GET /v1/files/{file_id}",
    "GET /v1/files/{file_id}/content",
    "DELETE /v1/files/{file_id}",
    "POST /v1/batches",
    "GET /v1/batches",
    "GET /v1/batches/{batch_id}",
    "POST /v1/batches/{batch_id}/cancel",
    "GET /health",
    "GET /metrics",
    "GET /v1/models",
    "GET /v1/models/{model_id}",
    "POST /admin/clear_prefix_cache",
    "POST /tokenize",
    "POST /detokenize",
    "GET /tokenizer_info",
]
# Examples per operation and mode: about 350 requests in all, which keeps the test under a minute on 2 cores.
EXAMPLES = {GenerationMode.POSITIVE: 40, GenerationMode.NEGATIVE: 25}
PATH_ONLY_EXAMPLES = 10
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
CONFORMANCE = [schemathesis.checks.status_code_conformance, schemathesis.checks.content_type_conformance,
               schemathesis.checks.response_schema_conformance]


@pytest.fixture(scope="module")
def fuzz_url(tokenizer) -> Iterator[str]:
    from hinfer.server import create_app

    # lanes >= 16 (MAX_CHOICES): the scripted engine holds a lane until its events are read, so a request's
    # own choices would otherwise queue behind each other until the queue timeout.
    engine = ScriptedEngine(tokenizer, SCRIPTS, default="Fine.\n</think>\n\nDefault answer.", lanes=16,
                            max_pending=16, max_context=4096, model_name=MODEL)
    engine.clear_prefix_cache = lambda: None  # what the real Engine has (the scripted one answers 501)
    with live_server(create_app(engine, tokenizer, model_name=MODEL, model_aliases=["alias-model"])) as url:
        yield url


@pytest.fixture(scope="module")
def schema(fuzz_url):
    return schemathesis.openapi.from_url(fuzz_url + "/openapi.json")


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def served_model(case: Case) -> Case:
    """Every body names the served model, so requests get past the model check to the deeper ones, and asks
    for few tokens."""
    if isinstance(case.body, dict):
        case.body["model"] = MODEL
        for key in TOKEN_FIELDS:
            value = case.body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 32:
                case.body[key] = 16
    return case


def problem(response: schemathesis.Response) -> str | None:
    """What is wrong with an answer, or None."""
    if response.status_code >= 500:
        return f"status {response.status_code}: {response.text[:300]}"
    ctype = ",".join(response.headers.get("content-type", []))  # headers: lowercase names, lists of values
    try:
        if ctype.startswith("application/json"):
            json.loads(response.text)
        elif ctype.startswith("text/event-stream"):
            for line in response.text.splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
            if "internal_error" in response.text:
                return f"internal error in the stream: {response.text[-300:]}"
    except ValueError as e:
        return f"{ctype} body does not parse ({e}): {response.text[:300]}"
    return None


def test_the_schema_lists_every_route(schema):
    assert sorted(op.ok().label for op in schema.get_all_operations()) == sorted(OPERATIONS)


def fuzz(operation: APIOperation, mode: GenerationMode, examples: int, session: requests.Session) -> list[str]:
    """Send `examples` generated requests; return the problems found, each with a curl line to replay it."""
    found: list[str] = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode).map(served_model))
    def run(case: Case) -> None:
        response = case.call(session=session, timeout=30)
        issue = problem(response)
        if issue is None:
            try:
                case.validate_response(response, checks=CONFORMANCE)
            except schemathesis.errors.FailureGroup as e:
                issue = "not what /openapi.json declares: " + "; ".join(f"{f.title}: {f.message[:200]}" for f in e.exceptions)
        if issue is not None:
            found.append(f"{mode.value}: {case.as_curl_command()}\n  -> {issue}")

    run()
    return found


@pytest.mark.parametrize("label", OPERATIONS)
def test_no_server_errors(schema, session, label):
    method, path = label.split(" ", 1)
    operation = schema[path][method]
    if operation.body:
        found = [p for mode, n in EXAMPLES.items() for p in fuzz(operation, mode, n, session)]
    else:  # path parameters only: a string has nothing to violate
        found = fuzz(operation, GenerationMode.POSITIVE, PATH_ONLY_EXAMPLES, session)
    assert not found, "\n".join(found[:5])


def test_the_schema_declares_errors_streams_and_the_metrics_text(session, fuzz_url):
    paths = session.get(fuzz_url + "/openapi.json").json()["paths"]
    for path, ops in paths.items():
        for op in ops.values():
            assert "422" not in op["responses"] and "4XX" in op["responses"], path  # errors are 400, not 422
    error = paths["/v1/messages"]["post"]["responses"]["4XX"]["content"]["application/json"]["schema"]
    assert error["properties"]["type"] == {"const": "error"}  # Anthropic's shape on /v1/messages
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"):
        assert "text/event-stream" in paths[path]["post"]["responses"]["200"]["content"], path
    assert list(paths["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]

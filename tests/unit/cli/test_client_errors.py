"""How the client library reads the API's refusals and how the CLI shows them: a 422
names each refused field as the request spells it, a non-JSON answer still says what
came back, and a retry waits within bounds (gpucloud_client client.py and errors.py,
gpucloud_cli main.describe). No request is sent: answers are built as values."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpucloud_cli.main import describe
from gpucloud_cli.session import Failure
from gpucloud_client import Client
from gpucloud_client.api_session import _clean, _id, _items, _problem, _retry_after
from gpucloud_client.errors import ApiError, TransferFailed, Unreachable

VALIDATION: dict[str, Any] = {
    "title": "Request validation failed",
    "detail": "the request does not match the schema",
    "code": "validation_failed",
    "errors": [
        {"loc": ["body", "template", "ports", 0, "port"], "msg": "Input should be greater than 0"},
        {"loc": ["query", "limit"], "msg": "Input should be less than or equal to 200"},
        {"loc": ["path", "instance_id"], "msg": "String should match pattern"},
    ],
}


# --- ApiError --------------------------------------------------------------------------


def test_a_422_names_each_field_as_the_request_spells_it() -> None:
    assert ApiError(422, VALIDATION).fields == [
        ("template.ports[0].port", "Input should be greater than 0"),
        ("limit", "Input should be less than or equal to 200"),
        ("instance_id", "String should match pattern"),
    ]


def test_a_refusal_of_the_request_as_a_whole_says_so() -> None:
    error = ApiError(422, {"errors": [{"loc": ["body"], "msg": "Field required"}, {"loc": []}]})
    assert error.fields == [("(the request)", "Field required"), ("(the request)", "")]


def test_an_error_item_that_is_no_mapping_is_left_out() -> None:
    assert ApiError(422, {"errors": ["odd", {"loc": ["body", "x"], "msg": "m"}]}).fields == [
        ("x", "m")
    ]


def test_a_problem_without_code_or_title_is_named_by_its_status() -> None:
    error = ApiError(503, {})
    assert (error.code, error.title, error.detail, str(error)) == (
        "http_503", "HTTP 503", "", "HTTP 503",
    )  # fmt: skip


def test_a_problems_message_is_its_title_and_detail() -> None:
    assert str(ApiError(422, VALIDATION)) == (
        "Request validation failed: the request does not match the schema"
    )


# --- reading an answer -----------------------------------------------------------------


def test_a_json_problem_is_read_as_it_is() -> None:
    body = {"code": "tenant_not_ready", "title": "Tenant not ready", "detail": "soon"}
    error = _problem(httpx.Response(409, json=body))
    assert (error.status, error.code, error.body) == (409, "tenant_not_ready", body)


def test_an_answer_that_is_no_json_object_becomes_its_text_as_the_detail() -> None:
    html = _problem(httpx.Response(502, text="<html>bad gateway</html>"))
    assert (html.code, html.detail) == ("http_502", "<html>bad gateway</html>")
    listed = _problem(httpx.Response(400, json=["a", "b"]))
    assert listed.detail == '["a","b"]'


def test_a_long_text_answer_is_cut_to_500_characters() -> None:
    error = _problem(httpx.Response(500, text="x" * 2000))
    assert error.detail == "x" * 500


@pytest.mark.parametrize(
    ("header", "wait_s"),
    [(None, 1.0), ("2.5", 2.5), ("0", 0.1), ("-3", 0.1), ("120", 10.0), ("soon", 1.0)],
)
def test_a_retry_waits_what_the_api_asks_within_a_tenth_and_ten_seconds(
    header: str | None, wait_s: float
) -> None:
    headers = {"Retry-After": header} if header is not None else {}
    assert _retry_after(httpx.Response(429, headers=headers)) == wait_s


# --- building a request ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "a/b", ".", "..", "/"])
def test_a_path_segment_that_could_reach_another_route_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not an id"):
        _id(value)


def test_an_id_with_dots_or_dashes_inside_is_a_segment_as_it_is() -> None:
    assert _id("i-3f2a.9c") == "i-3f2a.9c"
    assert _id("...") == "..."


def test_unset_query_parameters_are_dropped_and_falsy_values_kept() -> None:
    assert _clean({"cursor": None, "limit": 0, "prefix": "", "follow": False}) == {
        "limit": 0, "prefix": "", "follow": False,
    }  # fmt: skip
    assert _clean(None) is None
    assert _clean({}) is None


def test_a_list_answer_is_its_items_whether_bare_or_paged() -> None:
    assert _items([{"a": 1}]) == [{"a": 1}]
    assert _items({"items": [{"a": 1}], "nextCursor": None}) == [{"a": 1}]


def test_a_client_calls_the_v1_api_under_the_endpoint_with_its_key() -> None:
    with Client("https://gpu.example.com/", "gpc_key") as client:
        assert client.endpoint == "https://gpu.example.com"
        assert str(client._http.base_url) == "https://gpu.example.com/v1/"
        assert client._http.headers["Authorization"] == "Bearer gpc_key"


# --- how the CLI shows them ------------------------------------------------------------


def test_the_cli_shows_a_422_with_its_code_status_and_one_line_per_field() -> None:
    assert describe(ApiError(422, VALIDATION)).splitlines() == [
        "Request validation failed (validation_failed, HTTP 422): "
        "the request does not match the schema",
        "  template.ports[0].port: Input should be greater than 0",
        "  limit: Input should be less than or equal to 200",
        "  instance_id: String should match pattern",
    ]


def test_the_cli_shows_a_problem_without_detail_on_one_line() -> None:
    assert describe(ApiError(404, {"title": "Not found", "code": "not_found"})) == (
        "Not found (not_found, HTTP 404)"
    )


def test_the_cli_says_which_api_it_could_not_reach() -> None:
    error = Unreachable("https://gpu.example.com: timed out")
    assert describe(error) == "cannot reach the API at https://gpu.example.com: timed out"
    assert describe(TransferFailed("the object store refused")) == "the object store refused"


def test_a_failure_is_one_error_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    Failure("no profile 'prod'").show()
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "error: no profile 'prod'\n")
    assert Failure("x").exit_code == 1

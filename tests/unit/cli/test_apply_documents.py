"""How `gpucloud apply -f` reads its files before it asks the API anything: every
document is checked for a kind and a name, each problem names its file (and document),
and a file declaring one object twice is refused; what each plan prints (apply.py).
The decisions against an existing object are in test_apply_and_offers.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpucloud_cli.apply import (
    CONFIGURED,
    CREATED,
    UNCHANGED,
    Planned,
    declared,
    matches,
    read_documents,
    service_changes,
)
from gpucloud_cli.main import cli
from gpucloud_cli.session import Failure

CURRENT = {"serviceID": "chat", "port": 8000, "specName": "h100x1", "image": "vllm:0.6",
           "minReplicas": 1, "maxReplicas": 4, "env": [{"name": "A", "value": "1"}]}  # fmt: skip


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def refusal(name: str) -> str:
    with pytest.raises(Failure) as refused:
        list(read_documents(name))
    return refused.value.format_message()


# --- reading files ---------------------------------------------------------------------


def test_a_file_of_several_documents_names_each_by_its_place(tmp_path: Path) -> None:
    name = write(tmp_path, "stack.yaml", "kind: job\njobID: a\n---\nkind: service\nserviceID: b\n")
    found = list(read_documents(name))
    assert [(item.ref, item.origin) for item in found] == [
        ("job/a", f"{name}, document 1"),
        ("service/b", f"{name}, document 2"),
    ]
    assert found[1].body == {"serviceID": "b"}  # the kind is not part of the create body


def test_a_file_of_one_document_is_named_by_the_file_alone(tmp_path: Path) -> None:
    name = write(tmp_path, "job.yaml", "---\nkind: job\njobID: a\nimage: x\n---\n")
    (item,) = read_documents(name)
    assert (item.origin, item.body) == (name, {"jobID": "a", "image": "x"})


def test_stdin_is_read_for_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: instance\ninstanceID: nb\n"))
    (item,) = read_documents("-")
    assert (item.ref, item.origin) == ("instance/nb", "stdin")


def test_a_file_without_documents_says_what_each_needs(tmp_path: Path) -> None:
    name = write(tmp_path, "empty.yaml", "---\n---\n")
    assert refusal(name) == f"{name}: no documents; each needs a kind: instance, job or service"


def test_invalid_yaml_is_named_with_its_line_and_column(tmp_path: Path) -> None:
    name = write(tmp_path, "tab.yaml", "kind: job\n\tjobID: x\n")
    assert refusal(name) == (
        f"{name}: not valid YAML: found character '\\t' that cannot start any token "
        "(line 2, column 1)"
    )


def test_a_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    assert refusal(str(tmp_path / "absent.yaml")) == (
        f"cannot read {tmp_path / 'absent.yaml'}: No such file or directory"
    )
    assert refusal(str(tmp_path)) == f"cannot read {tmp_path}: Is a directory"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe")
    assert refusal(str(binary)).startswith(f"cannot read {binary}: 'utf-8' codec can't decode")


def test_a_problem_in_the_second_document_names_it(tmp_path: Path) -> None:
    name = write(tmp_path, "two.yaml", "kind: job\njobID: a\n---\nkind: job\n")
    assert refusal(name) == (
        f"{name}, document 2: a job needs its name as jobID, so that the next apply finds it"
    )


def test_a_kind_that_is_no_text_is_an_unknown_kind() -> None:
    with pytest.raises(Failure, match="unknown kind 3; apply takes kind: instance, job or service"):
        declared({"kind": 3}, "a.yaml")


def test_a_name_must_be_non_empty_text() -> None:
    for name in ("", 42, None):
        with pytest.raises(Failure, match="needs its name as serviceID"):
            declared({"kind": "service", "serviceID": name}, "a.yaml")


# --- one apply of the files ------------------------------------------------------------


def test_an_object_declared_twice_is_refused_before_the_api_is_asked(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", "kind: job\njobID: train\n")
    second = write(tmp_path, "b.yaml", "kind: job\njobID: train\n")
    result = CliRunner(env={"GPUCLOUD_CONFIG": str(tmp_path / "none.json")}).invoke(
        cli, ["apply", "-f", first, "-f", second]
    )
    assert result.exit_code == 1
    assert result.stderr == f"error: {second}: job/train is declared twice\n"


# --- plans -----------------------------------------------------------------------------


def test_a_plans_line_names_the_result_the_changed_fields_and_the_state() -> None:
    item = declared({"kind": "service", "serviceID": "chat", "image": "x"}, "a.yaml")
    plan = Planned(item, CONFIGURED, "ready", {"image": "x", "env": []})
    assert plan.line() == "service/chat configured: env, image (ready)"
    assert plan.summary() == {
        "kind": "service", "name": "chat", "result": "configured", "state": "ready",
        "changed": ["env", "image"],
    }  # fmt: skip
    assert Planned(item, UNCHANGED, "ready").line() == "service/chat unchanged (ready)"
    assert Planned(item, CREATED, "pending").summary()["changed"] == []


# --- comparing a service ---------------------------------------------------------------


def test_nested_values_compare_field_by_field_and_lists_in_order() -> None:
    assert matches({"a": {"b": [1, {"c": 2}]}}, {"a": {"b": [1, {"c": 2, "d": 3}]}, "e": 4})
    assert not matches([1, 2], [2, 1])
    assert not matches({"a": 1}, None)
    assert not matches([1], {"0": 1})
    assert matches(None, None)


def test_a_fixed_field_given_as_it_is_is_no_change() -> None:
    item = declared({"kind": "service", "serviceID": "chat", "port": 8000, "specName": "h100x1",
                     "image": "vllm:0.7"}, "a.yaml")  # fmt: skip
    assert service_changes(item, CURRENT) == {"image": "vllm:0.7"}


def test_every_fixed_field_that_differs_is_named_in_one_refusal() -> None:
    item = declared({"kind": "service", "serviceID": "chat", "port": 9000,
                     "specName": "a100x1"}, "a.yaml")  # fmt: skip
    with pytest.raises(Failure) as refused:
        service_changes(item, CURRENT)
    assert refused.value.format_message() == (
        "a.yaml: service/chat cannot change port 8000 to 9000, specName 'h100x1' to 'a100x1' "
        "in place; delete it (`gpucloud services delete chat`) and apply again"
    )


def test_a_raised_floor_keeps_a_ceiling_the_file_gives_or_one_already_above_it() -> None:
    def changes(**fields: object) -> dict[str, object]:
        item = declared({"kind": "service", "serviceID": "chat", **fields}, "a.yaml")
        return service_changes(item, CURRENT)

    assert changes(minReplicas=6, maxReplicas=8) == {"minReplicas": 6, "maxReplicas": 8}
    assert changes(minReplicas=3) == {"minReplicas": 3}  # below the ceiling of 4
    assert changes(minReplicas=5) == {"minReplicas": 5, "maxReplicas": 5}


def test_a_reordered_env_is_a_change() -> None:
    current = {**CURRENT, "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    swapped = [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    item = declared({"kind": "service", "serviceID": "chat", "env": swapped}, "a.yaml")
    assert service_changes(item, current) == {"env": swapped}

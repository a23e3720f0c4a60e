"""What the `gpucloud` commands refuse before any request leaves the machine: a copy
with no remote side or a directory without -r, a size or an environment variable that
does not parse, an endpoint that would send a key in clear, a command that changes
nothing. Each runs the real command; the only endpoint configured is a closed loopback
port, and none of these refusals reaches it."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from gpucloud_cli import config
from gpucloud_cli.instances import parse_env
from gpucloud_cli.main import cli
from gpucloud_cli.storages import Remote, parse_remote, parse_size


@pytest.fixture
def gpucloud(tmp_path: Path) -> CliRunner:
    """The CLI with a config of its own and, for commands that make a client, a loopback
    endpoint nothing listens on."""
    return CliRunner(env={
        "GPUCLOUD_CONFIG": str(tmp_path / "config.json"), "GPUCLOUD_PROFILE": None,
        "GPUCLOUD_ENDPOINT": "http://127.0.0.1:9", "GPUCLOUD_API_KEY": "gpc_test_key",
    })  # fmt: skip


def usage_error(result: Result) -> str:
    """The one-line reason of a usage error (exit code 2)."""
    assert result.exit_code == 2, result.output
    return result.stderr.strip().splitlines()[-1]


# --- gpucloud cp -----------------------------------------------------------------------


def test_a_copy_needs_exactly_one_remote_side(gpucloud: CliRunner) -> None:
    both_local = gpucloud.invoke(cli, ["cp", "a.txt", "b.txt"])
    assert (
        usage_error(both_local) == "Error: one side must be local and the other gpc://STORAGE/KEY"
    )
    both_remote = gpucloud.invoke(cli, ["cp", "gpc://a/x", "gpc://b/x"])
    assert usage_error(both_remote) == usage_error(both_local)


def test_a_directory_goes_up_only_with_recursive(gpucloud: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "dataset").mkdir()
    result = gpucloud.invoke(cli, ["cp", str(tmp_path / "dataset"), "gpc://data/v1/"])
    assert usage_error(result) == f"Error: {tmp_path / 'dataset'} is a directory: use -r"


def test_a_missing_local_file_is_named(gpucloud: CliRunner, tmp_path: Path) -> None:
    result = gpucloud.invoke(cli, ["cp", str(tmp_path / "absent.bin"), "gpc://data/"])
    assert usage_error(result) == f"Error: {tmp_path / 'absent.bin'}: no such file"


def test_a_prefix_comes_down_only_with_recursive(gpucloud: CliRunner, tmp_path: Path) -> None:
    """A key ending in `/` names a prefix, not an object: said before any request."""
    result = gpucloud.invoke(cli, ["cp", "gpc://data/v1/", str(tmp_path)])
    assert usage_error(result) == "Error: gpc://data/v1/ names a prefix: use -r"


def test_a_whole_storage_comes_down_only_with_recursive(
    gpucloud: CliRunner, tmp_path: Path
) -> None:
    result = gpucloud.invoke(cli, ["cp", "gpc://data/", str(tmp_path)])
    assert usage_error(result) == "Error: gpc://data/ names a prefix: use -r"


def test_deleting_one_object_is_refused_with_the_ways_that_exist(gpucloud: CliRunner) -> None:
    result = gpucloud.invoke(cli, ["storages", "rm", "gpc://data/v1/a.txt", "--yes"])
    assert usage_error(result).startswith(
        "Error: gpc://data/v1/a.txt names an object, and the API deletes whole storages only"
    )


# --- locations and sizes ---------------------------------------------------------------


def test_a_remote_location_is_a_storage_and_a_key() -> None:
    assert parse_remote("gpc://models/llama/7b.bin") == Remote("models", "llama/7b.bin")
    assert parse_remote("gpc://models") == Remote("models", "")


def test_a_remote_key_as_a_folder_ends_in_one_slash() -> None:
    assert Remote("s", "").prefix == ""
    assert Remote("s", "v1").prefix == "v1/"
    assert Remote("s", "v1/").prefix == "v1/"


@pytest.mark.parametrize("location", ["s3://models/x", "models/x", "gpc://", "gpc:///x"])
def test_a_location_that_is_not_gpc_storage_key_is_refused(location: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_remote(location)


@pytest.mark.parametrize(
    ("text", "size"),
    [("20GiB", 20 * 2**30), ("500MB", 500 * 10**6), ("1.5 gib", 3 * 2**29),
     (" 7 kb ", 7000), ("4096", 4096), ("2TiB", 2 * 2**40), ("10b", 10)],
)  # fmt: skip
def test_a_size_takes_decimal_and_binary_units_in_any_case(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text", ["", "GiB", "20 GB s", "20 pb", "lots", "-1GiB", "1.2.3GB", ".", "..MiB"]
)
def test_a_size_without_a_number_or_with_an_unknown_unit_is_refused(text: str) -> None:
    with pytest.raises(click.BadParameter, match="is not a size like 20GiB or 500MB"):
        parse_size(text)


def test_a_bad_size_is_a_usage_error_of_storages_create(gpucloud: CliRunner) -> None:
    result = gpucloud.invoke(cli, ["storages", "create", "models", "--size", "lots"])
    assert usage_error(result) == (
        "Error: Invalid value for --size: 'lots' is not a size like 20GiB or 500MB"
    )


# --- instances, services, jobs, prices -------------------------------------------------


def test_an_environment_variable_is_name_equals_value() -> None:
    assert parse_env(("A=1", "B=", "C=x=y")) == [
        {"name": "A", "value": "1"}, {"name": "B", "value": ""}, {"name": "C", "value": "x=y"},
    ]  # fmt: skip
    for bad in ("A", "=1"):
        with pytest.raises(click.BadParameter, match="is not NAME=VALUE"):
            parse_env((bad,))


def test_an_instance_needs_an_image_or_a_template(gpucloud: CliRunner) -> None:
    result = gpucloud.invoke(cli, ["instances", "create", "--spec", "h100-1"])
    assert usage_error(result) == "Error: give --image, or a --template"


def test_a_public_key_goes_with_a_template(gpucloud: CliRunner, tmp_path: Path) -> None:
    key = tmp_path / "id.pub"
    key.write_text("ssh-ed25519 AAAA me@host\n")
    result = gpucloud.invoke(
        cli, ["instances", "create", "--spec", "h100-1", "--image", "x", "--public-key", str(key)]
    )
    assert usage_error(result) == "Error: --public-key goes with a --template that takes one"


def test_a_service_needs_an_image_and_a_port_or_a_template(gpucloud: CliRunner) -> None:
    result = gpucloud.invoke(
        cli, ["services", "create", "chat", "--spec", "h100-1", "--image", "x"]
    )
    assert usage_error(result) == "Error: give --image and --port, or a --template"


def test_a_service_update_must_change_something(gpucloud: CliRunner) -> None:
    result = gpucloud.invoke(cli, ["services", "update", "chat"])
    assert usage_error(result) == "Error: give what changes: --image, --env or --command"


def test_a_job_file_must_hold_a_mapping(gpucloud: CliRunner, tmp_path: Path) -> None:
    listed = tmp_path / "job.yaml"
    listed.write_text("- image: x\n")
    result = gpucloud.invoke(cli, ["jobs", "submit", str(listed)])
    assert usage_error(result) == (
        "Error: Invalid value for SPEC_FILE: the file must hold a mapping of the job's fields"
    )


def test_a_price_is_for_a_spec_or_for_storage_not_both(gpucloud: CliRunner) -> None:
    neither = gpucloud.invoke(cli, ["prices", "set", "2.50"])
    both = gpucloud.invoke(cli, ["prices", "set", "2.50", "--spec", "h100-1", "--storage"])
    assert usage_error(neither) == usage_error(both) == "Error: give --spec NAME or --storage"


# --- profiles --------------------------------------------------------------------------


def test_login_refuses_an_endpoint_in_clear_before_asking_for_the_key(tmp_path: Path) -> None:
    runner = CliRunner(env={"GPUCLOUD_CONFIG": str(tmp_path / "config.json")})
    result = runner.invoke(cli, ["login", "--endpoint", "http://gpu.example.com"], input="key\n")
    assert result.exit_code == 1
    assert "API key:" not in result.output  # never prompted for
    assert result.stderr.startswith("error: refusing http://gpu.example.com: an API key would")
    assert not (tmp_path / "config.json").exists()


def test_a_command_without_a_profile_says_to_log_in(tmp_path: Path) -> None:
    runner = CliRunner(env={"GPUCLOUD_CONFIG": str(tmp_path / "config.json"),
                            "GPUCLOUD_ENDPOINT": None, "GPUCLOUD_API_KEY": None})  # fmt: skip
    result = runner.invoke(cli, ["whoami"])
    assert result.exit_code == 1
    assert result.stderr == "error: not logged in (no profile 'default'): run `gpucloud login`\n"


def test_profiles_are_listed_with_the_current_one_marked(tmp_path: Path) -> None:
    runner = CliRunner(env={"GPUCLOUD_CONFIG": str(tmp_path / "config.json")})
    with runner.isolation():
        config.save(config.Profile("prod", "https://gpu.example.com", "k1"))
        config.save(config.Profile("lab", "http://127.0.0.1:8000", "k2"), make_current=False)
    result = runner.invoke(cli, ["-o", "json", "profiles"])
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == [
        "[", "{", '"profile":', '"prod",', '"endpoint":', '"https://gpu.example.com",',
        '"current":', "true", "},", "{", '"profile":', '"lab",', '"endpoint":',
        '"http://127.0.0.1:8000",', '"current":', "false", "}", "]",
    ]  # fmt: skip


def test_logging_out_of_no_profile_is_refused(gpucloud: CliRunner) -> None:
    result = gpucloud.invoke(cli, ["logout", "--keep-key"])
    assert (result.exit_code, result.stderr) == (1, "error: no profile 'default'\n")


# --- gpucloud quota set ----------------------------------------------------------------


def test_a_quota_change_names_a_ceiling_and_each_is_a_number_or_none(
    gpucloud: CliRunner,
) -> None:
    nothing = gpucloud.invoke(cli, ["quota", "set"])
    assert usage_error(nothing) == (
        "Error: give at least one of --gpus, --instances, --storage-bytes, "
        "--monthly-spend-cap-cents"
    )
    for value in ("many", "-1", "2.5"):
        wrong = gpucloud.invoke(cli, ["quota", "set", "--gpus", value])
        assert usage_error(wrong) == (
            f"Error: Invalid value for --gpus: {value!r} is neither a whole number nor 'none'"
        )

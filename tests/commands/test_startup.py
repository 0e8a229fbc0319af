"""Each command imports what it needs and nothing more: start-up is most of what ``check``
and ``rules lint`` cost in a pre-commit hook, and every command once imported every other
command's engine, cluster client, schema validator and server (bench/startup.py measures
the time; this file keeps the import sets from growing back)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import INVENTORY, ROOT, RULES
from tests.running import command_environment
from webhook.cli import build_parser, command_modules
from webhook.commands import SUMMARIES

# Top-level packages, or the webhook's own packages, by what they serve.
CLUSTER = {"urllib3", "kubernetes", "webhook.cluster"}
SERVER = {"flask", "werkzeug", "gunicorn", "prometheus_client", "webhook.serving"}
CERTIFICATES = {"cryptography", "webhook.files.certs"}
SCHEMA = {"jsonschema"}
ENGINE = {"webhook.engine", "celpy", "yaml"}
INVENTORY_READING = {
    "webhook.files.inventoryfile",
    "webhook.engine.resources.devices",
    "webhook.engine.evaluation",
}
EVERY_COMMAND = {f"webhook.commands.{name}" for name in SUMMARIES}

# The command as its script runs it, then the modules it left loaded, written at exit
# (``-X importtime`` misses what ``importlib.import_module`` loads: the commands).
PROGRAM = """
import atexit, sys
listing, sys.argv = sys.argv[1], ["gpu-webhook", *sys.argv[2:]]
atexit.register(lambda: open(listing, "w").write("\\n".join(sys.modules)))
from webhook.cli import main
sys.exit(main())
"""


def imported(tmp_path: Path, *args: str) -> set[str]:
    """Every module loaded once the command is done, in its own process."""
    listing = tmp_path / "modules"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(listing), *args],
        cwd=ROOT,
        env=command_environment({"NO_COLOR": "1"}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(listing.read_text().split())


POD = str(ROOT / "examples" / "gpu-pod.yaml")


@pytest.mark.parametrize(
    ("args", "needed", "not_needed"),
    [
        pytest.param(
            ["--version"],
            {"webhook.cli"},
            CLUSTER | SERVER | CERTIFICATES | SCHEMA | ENGINE | EVERY_COMMAND,
            id="--version imports no command",
        ),
        pytest.param(
            ["--help"],
            {"webhook.cli"},
            CLUSTER | SERVER | CERTIFICATES | SCHEMA | ENGINE | EVERY_COMMAND,
            id="--help lists the commands without importing them",
        ),
        pytest.param(
            ["check", POD, "--inventory", str(INVENTORY), "--rules", str(RULES)],
            {"webhook.commands.check", "webhook.engine.evaluation", "webhook.reports.findings"},
            # No DRA selector in the pod: the CEL environment and its parser are never built.
            CLUSTER
            | SERVER
            | CERTIFICATES
            | {"celpy", "lark", "webhook.reports.audit", "webhook.reports.explain"}
            | {"importlib.resources", "xml.etree.ElementTree"}
            # Valid rules are told valid without jsonschema (webhook.engine.policy.schemasubset).
            | SCHEMA
            | (EVERY_COMMAND - {"webhook.commands.check"}),
            id="check of a file reads no cluster",
        ),
        pytest.param(
            ["test", str(ROOT / "policy-tests" / "rules")],
            {"webhook.commands.test", "webhook.commands.check", "jsonschema"},
            # It judges as check does, with check's own function, and reads no cluster.
            CLUSTER
            | SERVER
            | CERTIFICATES
            | (EVERY_COMMAND - {"webhook.commands.test", "webhook.commands.check"}),
            id="test of suites reads no cluster",
        ),
        pytest.param(
            ["rules", "lint", str(RULES)],
            {"webhook.commands.rules", "webhook.engine.policy.schemasubset"},
            # Without --inventory: no inventory parser, device model or evaluation; valid
            # rules need no jsonschema.
            CLUSTER
            | SERVER
            | CERTIFICATES
            | INVENTORY_READING
            | SCHEMA
            | (EVERY_COMMAND - {"webhook.commands.rules"}),
            id="rules lint reads only rules",
        ),
        pytest.param(
            ["serve", "--help"],
            {"webhook.commands.serve"},
            CLUSTER | SERVER - {"webhook.serving"} | CERTIFICATES | ENGINE,
            id="serve --help starts no server",
        ),
        pytest.param(
            ["certs", "--help"],
            {"webhook.commands.certs"},
            CLUSTER | SERVER | SCHEMA | ENGINE,
            id="certs --help needs only the certificate library",
        ),
    ],
)
def test_a_command_imports_only_what_it_needs(
    tmp_path: Path, args: list[str], needed: set[str], not_needed: set[str]
) -> None:
    modules = imported(tmp_path, *args)
    assert needed <= modules
    assert sorted(not_needed & modules) == []


def test_every_command_module_has_its_line_in_the_help() -> None:
    assert sorted(SUMMARIES) == command_modules()


def test_the_help_listing_is_the_same_without_importing_the_commands() -> None:
    assert build_parser("").format_help() == build_parser().format_help()


def test_a_command_is_parsed_in_full_when_only_its_module_is_imported() -> None:
    full = build_parser().parse_args(["check", "-f", POD, "--rules", "rules"])
    alone = build_parser("check").parse_args(["check", "-f", POD, "--rules", "rules"])
    assert vars(alone) == vars(full)

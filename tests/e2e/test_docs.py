"""The documentation says what the code does:

  - docs/cli.md is exactly what scripts/gen-cli-doc.py makes from the analyzer's help now;
  - the README's environment-variable table lists exactly the variables of
    include/vramtrace/options.h, with their defaults and meanings;
  - every command has --help with examples, and `vramtrace --version` names the trace format;
  - every command in the README's command table exists, with the options the table shows, and
    every command is in the table;
  - every test docs/RELIABILITY.md names as a behaviour's guard exists;
  - every README example of a command on a trace recorded on the H200 is what the command prints
    on that trace now.
"""
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from conftest import SOURCE, VRAMTRACE, analyze, clean_env, program

README = SOURCE / "README.md"
OPTIONS_H = SOURCE / "include" / "vramtrace" / "options.h"
FORMAT_H = SOURCE / "include" / "vramtrace" / "format.h"
RELIABILITY = SOURCE / "docs" / "RELIABILITY.md"

# An empty default in options.h means "unset"; the README may give what that does instead. Each
# such entry is checked by running the code (test_output_default_is_a_file_per_pid_here).
EFFECTIVE_DEFAULTS = {"VRAMTRACE_OUTPUT": "./vramtrace.<pid>.vrt"}


# ---- helpers ------------------------------------------------------------------------------

def c_string_literals(text):
    """The concatenation of the C string literals in text."""
    out = ""
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', text):
        out += bytes(lit, "utf-8").decode("unicode_escape")
    return out


def options_from_header():
    """{name: (default, help)} from the VRT_OPTIONS X-macro table."""
    text = OPTIONS_H.read_text()
    body = text[text.index("#define VRT_OPTIONS(X)"):]
    body = body[:body.index("\n\n")].replace("\\\n", " ")
    options = {}
    for m in re.finditer(r'X\(\s*(\w+)\s*,\s*"([^"]*)"\s*,\s*(\w+)\s*,\s*"([^"]*)"\s*,\s*([^,]+?)\s*,\s*([^,]+?)\s*,'
                         r'\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)', body):
        options[m[2]] = (m[4], c_string_literals(m[7]))
    assert len(options) == body.count("X("), "a row of the X-macro table did not parse"
    return options


def markdown_table(section):
    """Rows (lists of cells) of the first table under the '## section' heading of the README."""
    text = README.read_text()
    start = text.index("\n## " + section + "\n")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start:end if end >= 0 else None].splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append(cells)
    assert rows, f"no table under '## {section}' in README.md"
    return rows[1:]  # without the header row


def unquote(cell):
    m = re.fullmatch(r"`([^`]*)`", cell)
    return m[1] if m else cell


def help_overview_commands():
    text = analyze("help").stdout
    lines = text.splitlines()
    return [m[1] for m in (re.match(r"^  (\S+)\s", line) for line in lines[lines.index("commands:") + 1:]) if m]


COMMANDS = help_overview_commands()


# ---- docs/cli.md ---------------------------------------------------------------------------

def test_cli_md_is_generated_from_the_current_help():
    spec = importlib.util.spec_from_file_location("gen_cli_doc", SOURCE / "scripts" / "gen-cli-doc.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    expected = gen.render(VRAMTRACE)
    current = (SOURCE / "docs" / "cli.md").read_text()
    assert current == expected, "docs/cli.md is stale: run scripts/gen-cli-doc.py"
    for name in COMMANDS:
        assert f"\n## vramtrace {name}\n" in current


# ---- the README's environment variables ------------------------------------------------------

def readme_env():
    rows = markdown_table("Environment variables")
    env = {}
    for cells in rows:
        assert len(cells) == 3, cells
        name, default, meaning = unquote(cells[0]), unquote(cells[1]), cells[2]
        assert name not in env, f"{name} twice in the README"
        env[name] = (default, meaning)
    return env


def test_readme_lists_exactly_the_variables_of_options_h():
    assert sorted(readme_env()) == sorted(options_from_header())


@pytest.mark.parametrize("name", sorted(options_from_header()))
def test_readme_default_and_meaning(name):
    default, help_text = options_from_header()[name]
    readme_default, readme_meaning = readme_env().get(name, (None, None))
    if default:
        assert readme_default == default
    else:
        assert readme_default in ("", EFFECTIVE_DEFAULTS.get(name)), \
            f"{name} has no default in options.h; the README gives {readme_default!r}"
    assert readme_meaning == help_text


def test_output_default_is_a_file_per_pid_here(tmp_path):
    """VRAMTRACE_OUTPUT unset: ./vramtrace.<pid>.vrt, as the README says."""
    assert EFFECTIVE_DEFAULTS["VRAMTRACE_OUTPUT"] == "./vramtrace.<pid>.vrt"
    env = clean_env()
    env.pop("RANK", None)  # a rank adds .rank<R> to the name
    p = subprocess.run([str(VRAMTRACE), "run", "-q", "--", program("rt_api")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    written = [f.name for f in tmp_path.iterdir()]
    assert len(written) == 1 and re.fullmatch(r"vramtrace\.\d+\.vrt", written[0]), written


# ---- --help and --version ----------------------------------------------------------------------

def test_help_lists_the_commands():
    assert "run" in COMMANDS and "report" in COMMANDS and len(COMMANDS) == len(set(COMMANDS))


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_examples(name):
    p = subprocess.run([str(VRAMTRACE), name, "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"usage: vramtrace {name}")
    assert p.stdout == analyze("help", name).stdout
    examples = p.stdout.split("\nexamples:\n", 1)
    assert len(examples) == 2, f"`vramtrace {name} --help` has no 'examples:' section"
    lines = [line.strip() for line in examples[1].splitlines() if line.strip()]
    assert lines and all(line.startswith("vramtrace ") for line in lines), lines
    assert any(line.startswith(f"vramtrace {name}") for line in lines)


def test_version_names_the_trace_format():
    header = FORMAT_H.read_text()
    major = re.search(r"#define VRT_FORMAT_MAJOR (\d+)", header)[1]
    minor = re.search(r"#define VRT_FORMAT_MINOR (\d+)", header)[1]
    project = re.search(r"version\s*:\s*'([^']+)'", (SOURCE / "meson.build").read_text())[1]
    for args in (["--version"], ["version"]):
        out = analyze(*args).stdout
        assert out == f"vramtrace {project} (trace format {major}.{minor})\n"


def test_python_package_version_is_the_project_version():
    project = re.search(r"version\s*:\s*'([^']+)'", (SOURCE / "meson.build").read_text())[1]
    init = (SOURCE / "python" / "vramtrace" / "__init__.py").read_text()
    assert re.search(r'^__version__ = "([^"]+)"', init, re.M)[1] == project


# ---- the README's command table ----------------------------------------------------------------

def readme_commands():
    """[(command, options shown, the usage text)] for every usage in the first column."""
    out = []
    for cells in markdown_table("Commands"):
        for usage in re.findall(r"`([^`]+)`", cells[0]):
            words = usage.split()
            if words[0] == "vramtrace":
                words = words[1:]
            if words[0].startswith("-"):  # `vramtrace --version`
                out.append((words[0], [], usage))
                continue
            out.append((words[0], re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", " ".join(words[1:])), usage))
    return out


def test_readme_commands_exist_with_their_options():
    for name, options, usage in readme_commands():
        if name.startswith("-"):
            assert analyze(name).returncode == 0, usage
            continue
        assert name in COMMANDS, f"README's command table: `{usage}`: there is no command {name}"
        help_text = analyze("help", name).stdout
        for option in options:
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text), \
                f"README's command table: `{usage}`: `vramtrace {name} --help` has no {option}"


def test_readme_command_table_lists_every_command():
    listed = {name for name, _, _ in readme_commands()}
    assert sorted(set(COMMANDS) - listed) == []


# ---- the tests RELIABILITY.md names -----------------------------------------------------------

def test_every_test_reliability_md_names_exists():
    """Its tables name the test that guards each behaviour; a renamed or removed test would leave
    the row pointing at nothing. A name is a file (test_x.py under tests/, test_x.c, or a pytest
    module without its .py), a test function (pytest's or a C unit test's), or a prefix of one
    written "test_x..."."""
    tests = SOURCE / "tests"
    files = {p.name for p in tests.rglob("test_*") if p.suffix in (".py", ".c")}
    functions = set()
    for p in list(tests.rglob("*.py")) + list(tests.rglob("*.c")):
        functions |= set(re.findall(r"^(?:def |static \w+ |\w+ )(test_\w+)\(", p.read_text(), re.M))
    missing = []
    for m in re.finditer(r"\b(test_\w+)(\.py|\.c|\.\.\.)?", RELIABILITY.read_text()):
        name, suffix = m.groups()
        known = (name + suffix in files if suffix in (".py", ".c")
                 else any(f.startswith(name) for f in functions) if suffix == "..."
                 else name in functions or name + ".py" in files)
        if not known:
            missing.append(name + (suffix or ""))
    assert not missing, f"docs/RELIABILITY.md names tests that do not exist: {sorted(set(missing))}"


def readme_examples():
    """(command line, shown lines) of every README block that begins with "$ vramtrace"."""
    blocks = re.findall(r"^```\n\$ (vramtrace [^\n]*)\n(.*?)^```$", README.read_text(), re.M | re.S)
    return [(command, shown.splitlines()) for command, shown in blocks]


def shows(shown, printed):
    """Whether every shown line is a printed line, in order: a line of "..." alone stands for
    lines left out, and a line ending in "..." for a printed line it begins."""
    at = 0
    for line in shown:
        if line.strip() == "...":
            continue
        prefix = line[:-3] if line.endswith("...") else None
        while at < len(printed) and not (printed[at].startswith(prefix) if prefix is not None else printed[at] == line):
            at += 1
        if at == len(printed):
            return line
        at += 1
    return None


@pytest.mark.parametrize("command,shown", readme_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_readme_example_is_what_the_command_prints(command, shown):
    h200 = SOURCE / "tests" / "golden" / "h200"
    args = command.split()[1:]
    assert (h200 / args[-1]).is_file(), f"the README's example runs on {args[-1]}, not a trace in {h200}"
    printed = subprocess.run([str(VRAMTRACE)] + args, cwd=h200, capture_output=True, text=True,
                             env=dict(clean_env(), COLUMNS="200")).stdout.splitlines()
    missing = shows(shown, printed)
    assert missing is None, f"the README shows a line `{command}` does not print:\n{missing}"


def test_readme_examples_are_checked():
    assert len(readme_examples()) >= 3
    assert shows(["a", "...", "c..."], ["a", "b", "cd"]) is None
    assert shows(["c", "a"], ["a", "b", "c"]) == "a"  # out of order
    assert shows(["a", "bx"], ["a", "b"]) == "bx"

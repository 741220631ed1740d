"""Property: whatever a container holds, the rendered Dockerfile has exactly the instructions
gpudev meant to write, each value exactly as captured, or the value is reported and left out.

Arbitrary text (control characters, newlines, backslashes, quotes, ``#``, ``$``, lone
surrogates from undecodable bytes) goes into every field of a change set; the Dockerfile is
split into instructions the way Docker's parser does (``tests.dockerfile_syntax``).
"""

from __future__ import annotations

import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpudev.changes import dockerfile as dockerfiles
from jupyter_gpudev.changes import model
from tests.dockerfile_syntax import env_value, exec_form, instructions, shell_words

CONTEXT = "gpudev-context/box"
BASE = "FROM gpudev-python:bookworm\nUSER jovyan\n"
TRICKY = [
    "a\nRUN touch /pwned",
    "x \\",
    "\\",
    "# not a comment",
    "a'b",
    'a"b',
    "<<EOF",
    "$HOME",
    "\r",
    "a\rRUN id",
    "\u2028RUN id",
    "\x85",
    "\x1b[2J",
    "\0",
    "a b",
    "",
    "1.0",
    "six",
    "git",
    "https://example.org/x.tar.gz",
    "https://example.org/x.tar.gz\nRUN id",
]
values = st.one_of(
    st.sampled_from(TRICKY),
    st.text(max_size=24),
    st.binary(max_size=16).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.from_regex(r"[a-z0-9][a-z0-9.+-]{0,8}", fullmatch=True),
)
paths = st.one_of(
    values.map(lambda v: "/" + v),
    st.sampled_from(
        [
            "/etc/a b.conf",
            '/etc/it\'s "quoted"',
            "/etc/apt/sources.list.d/x y.list",
            "/etc/a\nRUN touch /pwned",
            "/opt/x \\",
        ]
    ),
)


def dists() -> st.SearchStrategy[model.PyDist]:
    return st.builds(
        model.PyDist,
        values,
        values,
        st.sampled_from(["index", "editable", "vcs", "local", "archive", "invalid"]),
        st.one_of(values, values.map(lambda v: "git+https://x/" + v)),
    )


def python_changes() -> st.SearchStrategy[model.PythonChanges]:
    env = st.builds(
        model.PythonEnv,
        st.one_of(paths, st.just("/usr/bin/python3")),
        st.one_of(paths, st.just("/opt/venv")),
        st.one_of(paths, st.just("/usr")),
        st.one_of(values, st.just("3.11")),
        st.booleans(),
    )
    small = st.lists(dists(), max_size=3)
    return st.builds(
        model.PythonChanges,
        env,
        st.booleans(),
        small,
        small,
        st.lists(st.tuples(dists(), dists()), max_size=2),
    )


@st.composite
def change_sets(draw: st.DrawFn) -> model.ChangeSet:
    changes = model.ChangeSet()
    pairs = st.lists(st.tuples(values, values), max_size=3)
    changes.apt.added = draw(pairs)
    changes.apt.removed = draw(pairs)
    changes.apt.upgraded = draw(st.lists(st.tuples(values, values, values), max_size=2))
    changes.python = draw(st.lists(python_changes(), max_size=2))
    changes.conda = draw(
        st.lists(
            st.builds(
                model.CondaChanges,
                st.one_of(paths, st.just("/opt/conda")),
                st.lists(values, max_size=3),
                st.lists(values, max_size=3),
                st.lists(values, max_size=2).map(tuple),
            ),
            max_size=2,
        )
    )
    files = st.lists(paths, max_size=4, unique=True)
    changes.files = model.FileChanges(
        kept=draw(files),
        deleted=draw(files),
        secrets=draw(files),
        links=draw(st.dictionaries(paths, values, max_size=2)),
        skipped=draw(st.dictionaries(paths, values, max_size=2)),
    )
    changes.env = draw(st.dictionaries(st.one_of(values, st.just("MY_VAR")), values, max_size=4))
    changes.env_removed = draw(st.lists(values, max_size=2))
    changes.env_secrets = draw(st.lists(values, max_size=2))
    changes.notes = draw(st.lists(values, max_size=2))
    return changes


def render(
    changes: model.ChangeSet, message: str | None, created: bool
) -> dockerfiles.RenderedDiff:
    return dockerfiles.render(
        changes,
        container="box",
        environment="gpu",
        dockerfile="Dockerfile",
        old_text=None if created else BASE,
        image="gpudev-python:bookworm",
        context_folder=CONTEXT,
        message=message,
    )


def clean(text: str) -> bool:
    """No control, format, surrogate or line/paragraph separator character."""
    return all(unicodedata.category(c)[0] != "C" and c not in "\u2028\u2029" for c in text)


def decoded(keyword: str, args: str) -> tuple[str, list[str]]:
    """An instruction's arguments as the engine or the shell gets them (sorted)."""
    if keyword == "ENV":
        return keyword, sorted(env_value(args))
    if keyword == "RUN":
        words = exec_form(args) if args.startswith("[") else None
        return keyword, sorted(words if words is not None else shell_words(args))
    return keyword, sorted(args.split())


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(change_sets(), st.one_of(st.none(), values), st.booleans())
def test_no_value_adds_an_instruction(
    changes: model.ChangeSet, message: str | None, created: bool
) -> None:
    # When any change set is rendered
    rendered = render(changes, message, created)
    base = "FROM gpudev-python:bookworm\n" if created else BASE
    got = instructions(rendered.new_text)
    # Then the old Dockerfile's instructions are untouched
    assert got[: len(instructions(base))] == instructions(base)
    appended = got[len(instructions(base)) :]
    # And only the kinds of instruction gpudev writes follow, at most one per group
    assert {k for k, _ in appended} <= {"USER", "COPY", "RUN", "ENV"}
    groups = (
        2  # USER root / USER back
        + 2  # COPY of sources and of files
        + 2  # apt install, purge
        + 2 * len(changes.conda)
        + 3 * len(changes.python)
        + len(changes.files.links)
        + 1  # rm
        + len(changes.env)
    )
    assert len(appended) <= groups
    # And each one decodes (JSON exec form, shell words, ENV NAME="value") to clean words
    for keyword, args in appended:
        _, words = decoded(keyword, args)
        assert all(clean(w) for w in words), (keyword, args)
    # And what is reported is printable (a terminal or the panel shows it as it is)
    assert all(r.isprintable() for r in rendered.reported)


def expected(  # noqa: PLR0912 - one branch per kind of line, as the renderer has
    safe: model.ChangeSet, created: bool
) -> list[tuple[str, list[str]]]:
    """What gpudev means to write for a change set all of whose values can be written."""
    out: list[tuple[str, list[str]]] = []
    files = safe.files
    sources = [p for p in files.kept if dockerfiles.is_source_path(p)]
    others = [p for p in files.kept if not dockerfiles.is_source_path(p)]
    if sources:
        out.append(("COPY", [f"{CONTEXT}/sources/", "/"]))
    install = [f"{n}={v}" for n, v in safe.apt.added] + [
        f"{n}={v}" for n, _, v in safe.apt.upgraded
    ]
    if install:
        words = ["apt-get", "update", "&&", "apt-get", "install", "-y"]
        words += ["--no-install-recommends", *install, "&&", "rm", "-rf", "/var/lib/apt/lists/*"]
        out.append(("RUN", words))
    if safe.apt.removed:
        out.append(("RUN", ["apt-get", "purge", "-y", *(n for n, _ in safe.apt.removed)]))
    for conda in safe.conda:
        if conda.added:
            channels = [w for c in conda.channels for w in ("-c", c)]
            words = ["conda", "install", "-y", "-p", conda.prefix, *channels, *conda.added]
            out.append(("RUN", words))
        if conda.removed:
            out.append(("RUN", ["conda", "remove", "-y", "-p", conda.prefix, *conda.removed]))
    for py in safe.python:
        env = py.env
        flags = ["--break-system-packages"] if env.externally_managed else []
        if py.new_env and env.is_venv:
            venv = f"{env.base_prefix}/bin/python{env.version}"
            out.append(("RUN", [venv, "-m", "venv", env.prefix]))
        wanted = [*py.added, *(b for _, b in py.upgraded)]
        if py.new_env and env.is_venv:
            wanted = [d for d in wanted if d.name.lower() not in ("pip", "setuptools", "wheel")]
        reqs = [d.requirement() for d in wanted if d.source not in model.NOT_REPRODUCIBLE]
        if reqs:
            words = [env.python, "-m", "pip", "install", "--no-cache-dir", *flags, *reqs]
            out.append(("RUN", words))
        if py.removed:
            words = [env.python, "-m", "pip", "uninstall", "-y", *flags]
            out.append(("RUN", words + [d.name for d in py.removed]))
    if others:
        out.append(("COPY", [f"{CONTEXT}/files/", "/"]))
    out += [("RUN", ["ln", "-sfn", "--", t, p]) for p, t in sorted(files.links.items())]
    if files.deleted:
        out.append(("RUN", ["rm", "-rf", "--", *files.deleted]))
    out += [("ENV", [n, v]) for n, v in sorted(safe.env.items())]
    if out and not created:
        out = [("USER", ["root"]), *out, ("USER", ["jovyan"])]
    return [(k, sorted(w)) for k, w in out]


@SETTINGS
@given(change_sets(), st.one_of(st.none(), values), st.booleans())
def test_the_dockerfile_has_exactly_the_instructions_of_what_can_be_written(
    changes: model.ChangeSet, message: str | None, created: bool
) -> None:
    # Given the part of a change set that can be written (the rest is reported)
    reported: list[str] = []
    safe = dockerfiles.writable(changes, reported)
    # Then every value in it is clean, and what was left out is reported, printably
    for value in _values(safe):
        assert clean(value), repr(value)
    assert all(r.isprintable() for r in reported)
    # When the whole change set is rendered
    rendered = render(changes, message, created)
    base = "FROM gpudev-python:bookworm\n" if created else BASE
    appended = instructions(rendered.new_text)[len(instructions(base)) :]
    # Then its Dockerfile has exactly the instructions of the writable part, values intact
    assert [decoded(k, a) for k, a in appended] == expected(safe, created)
    # And every value left out is reported, and the files to copy are the writable ones
    assert set(reported) <= set(rendered.reported)
    assert rendered.files == sorted(
        safe.files.kept, key=lambda p: (not dockerfiles.is_source_path(p), p)
    )


def _values(safe: model.ChangeSet) -> list[str]:
    """Every value of a writable change set that its Dockerfile holds."""
    out = [v for pair in safe.apt.added for v in pair] + [n for n, _ in safe.apt.removed]
    out += [v for triple in safe.apt.upgraded for v in triple[::2]]
    for conda in safe.conda:
        out += [conda.prefix, *conda.added, *conda.removed, *conda.channels]
    for py in safe.python:
        env = py.env
        out += [env.python, env.prefix, env.base_prefix, env.version]
        out += [d.name for d in py.removed]
        for dist in [*py.added, *(b for _, b in py.upgraded)]:
            out += [dist.name, dist.version]
            if dist.source not in model.NOT_REPRODUCIBLE:
                out.append(dist.requirement())
    out += [*safe.files.kept, *safe.files.deleted, *safe.files.links, *safe.files.links.values()]
    out += [*safe.env, *safe.env.values()]
    return out

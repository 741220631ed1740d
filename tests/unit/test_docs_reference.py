"""The configuration reference of the documentation is generated from the traits, and has them
all: every ``config=True`` trait of every configurable class, with its help text as written in
the code (``docs/_ext/gpudev_config.py``, generated here in-process, without Sphinx)."""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from traitlets.config import Configurable

from jupyter_gpudev.app import GPUDevApp
from jupyter_gpudev.services import CLASSES
from jupyter_gpudev.shared.server import SHARED_CLASSES

DOCS = Path(__file__).resolve().parents[2] / "docs"


@functools.cache
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpudev_config", DOCS / "_ext/gpudev_config.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def sections(markdown: str) -> dict[str, str]:
    """The reference's text by class: each ``### `Class``` heading to the next."""
    parts = re.split(r"^### `(\w+)`$", markdown, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def defining_class(cls: type[Configurable], name: str) -> type:
    return next(base for base in cls.__mro__ if name in vars(base))


def test_every_option_of_every_configurable_class_is_in_the_reference() -> None:
    # Given the reference the documentation build puts into configuration.md
    docs = generator()
    by_class = sections(docs.reference_markdown())
    # Then every configurable class has a section
    assert set(by_class) >= {cls.__name__ for cls in CLASSES}
    assert set(by_class) >= {GPUDevApp.__name__, *(cls.__name__ for cls in SHARED_CLASSES)}
    classes: tuple[type[Configurable], ...] = (*CLASSES, *SHARED_CLASSES, GPUDevApp)
    for cls in classes:
        text = by_class[cls.__name__]
        for name in cls.class_traits(config=True):
            owner = defining_class(cls, name)
            if not owner.__module__.startswith("jupyter_gpudev."):
                continue  # a Jupyter base class's option: that project documents it
            if owner is cls:
                # And each option the class defines is a confval with its type and default
                assert f"````{{confval}} c.{cls.__name__}.{name}\n:type: " in text, (cls, name)
            else:
                # And an option it inherits from another gpudev class links to that one
                assert f"<c.{owner.__name__}.{name}>" in text, (cls, name)
                assert f"{{confval}} c.{owner.__name__}.{name}\n" in by_class[owner.__name__]


def test_each_option_carries_the_help_written_on_its_trait() -> None:
    # Given the reference and the traits of the classes it documents
    docs = generator()
    markdown = docs.reference_markdown()
    for cls in docs.documented_classes():
        for name, trait in cls.class_own_traits(config=True).items():
            # Then every option has a real help text, carried into the reference as it is
            assert trait.help.strip(), f"c.{cls.__name__}.{name} has no help="
            assert docs.prose(trait.help) in markdown, (cls, name)
            # And its default, unless the class computes it when it starts
            default = trait.default_value_repr()
            if name not in getattr(cls, "_trait_default_generators", {}):
                assert f":default: {docs._code(default)}\n" in markdown, (cls, name)


def test_help_texts_are_shown_literally_with_their_code_spans() -> None:
    # Given a help text with Markdown's special characters and both kinds of code span
    docs = generator()
    help_text = """Kept at <Jupyter data dir>/gpudev; patterns like gpudev-env-* and
        ``c.HostPool.hosts`` or `jupyter gpudev hosts` [sic].

        A second paragraph, `a*b_c`."""
    # When it is rendered
    rendered = docs.prose(help_text)
    # Then nothing in it is HTML, emphasis or a link, and the code spans stay code
    assert rendered == (
        r"Kept at \<Jupyter data dir\>\/gpudev\; patterns like gpudev\-env\-\* and "
        r"`c.HostPool.hosts` or `jupyter gpudev hosts` \[sic\]\."
        "\n\n"
        r"A second paragraph\, `a*b_c`\."
    )


def test_the_configuration_page_is_where_the_reference_goes() -> None:
    # Given the documentation's sources
    docs = generator()
    page = (DOCS / f"{docs.PAGE}.md").read_text()
    conf = (DOCS / "conf.py").read_text()
    # Then the page has the one marker the build replaces, and the build loads the extension
    assert page.count(docs.MARKER) == 1
    assert '"gpudev_config"' in conf
    # And nothing of the hand-written table the README had is left in the page
    assert "| option" not in page

"""A dev container's output, as ``jupyter gpudev logs``, the REST API and the panel's Logs tab
read it: a Docker container's from the engine (a pod's, from its cluster's API server, is
``pods.pod_output``). Without ``follow`` at most ``limit`` bytes are read (streamed, never the
whole log at once), then a line says where the output was cut (``cut_note``); ``tail``: only
its last lines."""

from __future__ import annotations

from collections.abc import Iterator

from docker.models.containers import Container

from .commands import close_stream


def cut_note(limit: int) -> str:
    return (
        f"\n[gpudev: the output is cut here, after {limit} bytes; ask for its last lines "
        "(tail) to see its end]\n"
    )


def container_output(
    container: Container, *, follow: bool, tail: int | None, limit: int
) -> Iterator[str]:
    """A Docker container's output (``follow``: as it comes, until it ends)."""
    if not follow:
        stream = container.logs(
            stream=True, follow=False, timestamps=False, tail="all" if tail is None else tail
        )
        read = 0
        try:
            for chunk in stream:
                if read + len(chunk) > limit:
                    yield chunk[: limit - read].decode(errors="replace")
                    yield cut_note(limit)
                    return
                read += len(chunk)
                yield chunk.decode(errors="replace")
        finally:
            close_stream(stream)
        return
    for chunk in container.logs(stream=True, follow=True):
        yield chunk.decode(errors="replace")

"""Sandbox images, built from sandbox/ on first use and cached by tag.

The default image is ``localhost/mitmchaos/sandbox:<version>``, the Node one the same tag
with ``-node``; ``localhost/mitmchaos/claude-code:latest`` and ``.../codex:latest`` add an
agent from npm to the Node one. ``localhost/mitmchaos/proxy:<version>`` holds mitmproxy and
mitmchaos itself (a wheel built from this checkout) for the kube backend's sidecars; its
base is trixie, because mitmproxy needs Python 3.12 and bookworm has 3.11.
Each carries a digest of the files in sandbox/ it was built from, and an image built from
older files is rebuilt (layers cached). Their base is ``debian:bookworm-slim`` when it is
already present (or ``MITMCHAOS_PULL_BASE=1`` allows pulling it from a registry); otherwise
a debootstrap'd bookworm rootfs imported as ``localhost/mitmchaos/base:bookworm``, because
many machines reach a Debian mirror but no container registry. Builds shell out to the podman CLI
(``podman build`` and ``import``); their output is shown only when they fail.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from mitmchaos import __version__
from mitmchaos.cleanup import state_dir
from mitmchaos.log import get_logger

log = get_logger(__name__)

REPOSITORY = "localhost/mitmchaos/sandbox"
CLAUDE_CODE_IMAGE = "localhost/mitmchaos/claude-code:latest"
CODEX_IMAGE = "localhost/mitmchaos/codex:latest"
# agents from npm on the -node image, by tag: their Containerfile in sandbox/
AGENT_IMAGES = {CLAUDE_CODE_IMAGE: "claude-code/Containerfile", CODEX_IMAGE: "codex/Containerfile"}
SUITE = "bookworm"
PROXY_REPOSITORY = "localhost/mitmchaos/proxy"
PROXY_SUITE = "trixie"
CONTEXT_LABEL = "io.mitmchaos.context"  # the digest of sandbox/ an image of ours was built from


class ImageError(RuntimeError):
    pass


def default_image(node: bool = False) -> str:
    return f"{REPOSITORY}:{__version__}{'-node' if node else ''}"


def proxy_image() -> str:
    return f"{PROXY_REPOSITORY}:{__version__}"


def sandbox_dir() -> Path:
    return Path(str(resources.files("mitmchaos.sandbox")))


def image_exists(tag: str) -> bool:
    return subprocess.run(["podman", "image", "exists", tag], capture_output=True).returncode == 0


def build_inputs(tag: str) -> list[str]:
    """The files in sandbox/ an image of ours is built from, its base image's included."""
    if tag in AGENT_IMAGES:
        return [*build_inputs(default_image(node=True)), AGENT_IMAGES[tag]]
    if tag == default_image(node=True):
        return [*build_inputs(default_image()), "Containerfile.node"]
    if tag == proxy_image():
        return ["Containerfile.proxy"]
    return ["Containerfile", "agent/mitmchaos_agent.py"]


def context_digest(tag: str) -> str:
    digest = hashlib.sha256()
    for name in build_inputs(tag):
        digest.update(name.encode() + b"\0" + (sandbox_dir() / name).read_bytes() + b"\0")
    if tag == proxy_image():  # the sidecars run this checkout's code: rebuilt when it changes
        for path in _package_sources():
            digest.update(path.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _package_sources() -> list[Path]:
    roots = [Path(str(resources.files(package))) for package in ("mitmchaos", "mitmchaos.addons")]
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _up_to_date(tag: str) -> bool:
    label = f'{{{{index .Labels "{CONTEXT_LABEL}"}}}}'
    result = subprocess.run(["podman", "image", "inspect", "--format", label, tag], capture_output=True,
                            text=True)
    return result.returncode == 0 and result.stdout.strip() == context_digest(tag)


def ensure_image(tag: str) -> str:
    """Return ``tag`` once it exists, building (or rebuilding) it if it is one of ours."""
    ours = tag in (default_image(), default_image(node=True), *AGENT_IMAGES, proxy_image())
    if image_exists(tag) and (not ours or _up_to_date(tag)):
        return tag
    if not ours:
        raise ImageError(f"sandbox image {tag!r} does not exist; build it first (podman build -t {tag} ...)")
    with _build_lock():
        _build_ours(tag)
    return tag


def _build_ours(tag: str) -> None:
    if _up_to_date(tag):  # built by another process while we waited for the lock
        return
    if tag in AGENT_IMAGES:
        _build_ours(default_image(node=True))
        _build(AGENT_IMAGES[tag], tag, {"SANDBOX": default_image(node=True)})
    elif tag == default_image(node=True):
        _build_ours(default_image())
        _build("Containerfile.node", tag, {"SANDBOX": default_image()})
    elif tag == proxy_image():
        with tempfile.TemporaryDirectory(prefix="mitmchaos-wheel-") as wheels:
            _build_wheel(Path(wheels))
            _build("Containerfile.proxy", tag, {"BASE": ensure_base(PROXY_SUITE)}, context=Path(wheels))
    else:
        _build("Containerfile", tag, {"BASE": ensure_base()})


def ensure_base(suite: str = SUITE) -> str:
    registry_base, local_base = f"debian:{suite}-slim", f"localhost/mitmchaos/base:{suite}"
    if image_exists(registry_base):
        return registry_base
    if os.environ.get("MITMCHAOS_PULL_BASE") == "1":
        _podman("pull", registry_base)
        return registry_base
    if not image_exists(local_base):
        _import_debootstrap_base(suite, local_base)
    return local_base


def _build_wheel(dest: Path) -> None:
    """A wheel of this checkout (the proxy image installs it; its dependencies come from the index)."""
    root = Path(str(resources.files("mitmchaos"))).parent
    if not (root / "pyproject.toml").is_file():
        raise ImageError(f"the proxy image is built from the mitmchaos source checkout; {root} is not one")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dest),
          str(root)])


def debian_mirror(sources: Path = Path("/etc/apt")) -> str | None:
    """The Debian mirror apt is configured with, so debootstrap uses the same one."""
    files = sorted(sources.glob("sources.list.d/*.sources")) + sorted(sources.glob("sources.list*"))
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":  # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if SUITE in fields.get("Suites", "").split() and fields.get("URIs"):
                    return fields["URIs"].split()[0]
        else:
            for m in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
                if m.group(2) == SUITE:
                    return m.group(1)
    return None


def _import_debootstrap_base(suite: str, tag: str) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageError("no registry base image and no debootstrap: run `make host` (sandbox/host-setup.sh)")
    rootfs = Path(tempfile.mkdtemp(prefix="mitmchaos-rootfs-", dir="/var/tmp"))
    try:
        mirror = debian_mirror()  # the host's bookworm mirror carries every suite
        log.info("building the base image with debootstrap", mirror=mirror or "debootstrap default")
        _run(["debootstrap", "--variant=minbase", suite, str(rootfs), *([mirror] if mirror else [])])
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            _run(["podman", "import", "--change", 'CMD ["/bin/bash"]', "--change",
                  "LABEL io.mitmchaos.image=base", "-", tag], stdin=tar.stdout)
        finally:
            tar.stdout.close()
            tar.wait()
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def _build(containerfile: str, tag: str, args: dict[str, str], context: Path | None = None) -> None:
    log.info("building sandbox image", tag=tag, containerfile=containerfile)
    build_args = [a for k, v in args.items() for a in ("--build-arg", f"{k}={v}")]
    _podman("build", "--pull=never", "-f", str(sandbox_dir() / containerfile), *build_args,
            "--secret", f"id=host-ca,src={host_ca_bundle()}",
            "--label", f"{CONTEXT_LABEL}={context_digest(tag)}", "-t", tag, str(context or sandbox_dir()))
    # A rebuild leaves the image it replaced untagged (hundreds of MB each): drop ours that nothing uses.
    _podman("image", "prune", "--force", "--filter", f"label={CONTEXT_LABEL}")


def host_ca_bundle() -> str:
    """The CA bundle the host trusts, given to builds that download packages (pip, npm)."""
    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("SSL_CERT_FILE"), paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return candidate
    raise ImageError("no CA bundle found on the host (set SSL_CERT_FILE to one)")


def _podman(*args: str) -> None:
    _run(["podman", *args])


def _run(cmd: list[str], stdin=None) -> None:
    result = subprocess.run(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise ImageError(f"{' '.join(cmd[:3])} ... failed ({result.returncode}):\n{result.stdout[-4000:]}")


@contextmanager
def _build_lock():
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "images.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield

"""Builds or downloads each server binary once into the cache, keyed by version.

Go servers are built from the Go module proxy through the wrapper modules in
deploy/local/go; Kafka's jars come from Maven Central through
deploy/local/kafka/pom.xml; Ceph comes from Debian's packages, fetched with
apt-get and unpacked into the cache (no system install, no root needed once
the package lists are there). A finished build is marked by a `.complete` file, so
an interrupted build is redone and a finished one costs nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from . import jobset, layout
from .errors import StackError

_K8S_VERSION_LDFLAGS = " ".join(
    f"-X k8s.io/component-base/version.{key}={value}"
    for key, value in {
        "gitVersion": layout.KUBERNETES_VERSION,
        "gitMajor": layout.KUBERNETES_VERSION.split(".")[0].lstrip("v"),
        "gitMinor": layout.KUBERNETES_VERSION.split(".")[1],
        "gitTreeState": "clean",
    }.items()
)


@dataclass(frozen=True)
class Artifact:
    """One cached build: a Go module build or a Maven dependency set."""

    name: str
    version: str
    source: Path  # the wrapper module or pom directory
    packages: tuple[str, ...] = ()  # Go packages; empty for Maven
    #: Debian packages, unpacked with their dependencies under `root/`.
    debian: tuple[str, ...] = ()
    #: Output name when one package is built (several are named after their paths).
    binary: str | None = None
    ldflags: str = "-s -w"
    #: Files of a Go module the build needs beside the binary (manifests), as
    #: (module, path in it): copied from the module cache under their base names.
    module_files: tuple[tuple[str, str], ...] = ()

    @property
    def directory(self) -> Path:
        return layout.cache_dir() / "bin" / f"{self.name}-{self.version}-{self._fingerprint()}"

    def _fingerprint(self) -> str:
        digest = hashlib.sha256(self.ldflags.encode())
        digest.update(" ".join(self.debian).encode())
        if self.module_files:  # (only then: the other builds keep their cache keys)
            digest.update(repr(self.module_files).encode())
        for path in sorted(self.source.iterdir()) if not self.debian else ():
            if path.is_file():
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
        return digest.hexdigest()[:8]

    def path(self, binary: str) -> Path:
        return self.directory / binary


GO_DIR = layout.LOCAL_DIR / "go"

KUBERNETES = Artifact(
    "kubernetes",
    layout.KUBERNETES_VERSION,
    GO_DIR / "kubernetes",
    (
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
    ),
    ldflags=f"-s -w {_K8S_VERSION_LDFLAGS}",
)
#: For the tests of `gpucloud kubeconfig`: what a tenant user runs against their namespace.
KUBECTL = Artifact(
    "kubectl",
    layout.KUBERNETES_VERSION,
    GO_DIR / "kubernetes",
    ("k8s.io/kubernetes/cmd/kubectl",),
    binary="kubectl",
    ldflags=f"-s -w {_K8S_VERSION_LDFLAGS}",
)
#: An OpenID Connect provider for the single sign-on tests, started by them alone
#: (the wrapper's main.go says why it is not Dex's own command).
DEX = Artifact(
    "dex", layout.DEX_VERSION, GO_DIR / "dex", ("gpucloud.local/build/dex",), binary="dex"
)
JOBSET = Artifact(
    "jobset",
    layout.JOBSET_VERSION,
    GO_DIR / "jobset",
    ("sigs.k8s.io/jobset",),
    binary="jobset",
    module_files=(("sigs.k8s.io/jobset", jobset.CRD_FILE),),
)
ETCD = Artifact(
    "etcd", layout.ETCD_VERSION, GO_DIR / "etcd", ("go.etcd.io/etcd/server/v3",), binary="etcd"
)
KWOK = Artifact(
    "kwok", layout.KWOK_VERSION, GO_DIR / "kwok", ("sigs.k8s.io/kwok/cmd/kwok",), binary="kwok"
)
FERRETDB = Artifact(
    "ferretdb",
    layout.FERRETDB_VERSION,
    GO_DIR / "ferretdb",
    ("gpucloud.local/build/ferretdb",),
    binary="ferretdb",
)
MINIO = Artifact(
    "minio", layout.MINIO_VERSION, GO_DIR / "minio", ("github.com/minio/minio",), binary="minio"
)
KAFKA = Artifact("kafka", layout.KAFKA_VERSION, layout.LOCAL_DIR / "kafka")
HELM = Artifact(
    "helm", layout.HELM_VERSION, GO_DIR / "helm", ("helm.sh/helm/v3/cmd/helm",), binary="helm"
)

CEPH = Artifact(
    "ceph",
    layout.CEPH_VERSION,
    layout.LOCAL_DIR,  # nothing of the repo goes into it
    debian=("ceph-mon", "ceph-mgr", "ceph-osd", "radosgw"),
)

#: Headless Chromium for the console's browser tests: unpacked like Ceph, never installed.
CHROMIUM = Artifact("chromium", layout.CHROMIUM_VERSION, layout.LOCAL_DIR, debian=("chromium",))

#: What every stack needs; the object store's own artifacts come with it (object_store()).
ALL = (KAFKA, FERRETDB, ETCD, KUBERNETES, KUBECTL, KWOK, JOBSET, HELM)


def object_store_artifacts() -> tuple[Artifact, ...]:
    return (CEPH,) if layout.object_store() == "ceph" else (MINIO,)


def _build_log(artifact: Artifact) -> Path:
    path = layout.cache_dir() / "build-logs" / f"{artifact.name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _require_tool(artifact: Artifact, tool: str, hint: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise StackError(artifact.name, f"`{tool}` is not on PATH; {hint}")
    return found


def _fetch_debian(artifact: Artifact, staging: Path, out: IO[str]) -> int:
    """Download the packages and whatever they need that the system lacks, then unpack
    every one under `staging/root`: the binaries run from there (ceph.py sets the
    library and plugin paths)."""
    apt = _require_tool(artifact, "apt-get", "Ceph comes from Debian's packages")
    _require_tool(artifact, "dpkg", "Ceph comes from Debian's packages")
    debs = staging / "debs"
    (debs / "partial").mkdir(parents=True)
    download = [
        apt, "install", "--download-only", "--yes", "--quiet", "--no-install-recommends",
        "-o", f"Dir::Cache::archives={debs}", *artifact.debian,
    ]  # fmt: skip
    fetched = subprocess.run(download, stdout=out, stderr=subprocess.STDOUT, check=False)
    if fetched.returncode != 0:
        # A fresh machine has no package lists yet.
        updated = subprocess.run([apt, "update", "--quiet"], stdout=out, stderr=out, check=False)
        if updated.returncode != 0:
            return updated.returncode
        fetched = subprocess.run(download, stdout=out, stderr=subprocess.STDOUT, check=False)
        if fetched.returncode != 0:
            return fetched.returncode
    for package in sorted(debs.glob("*.deb")):
        unpacked = subprocess.run(
            ["dpkg", "-x", str(package), str(staging / "root")],
            stdout=out, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
        if unpacked.returncode != 0:
            return unpacked.returncode
    shutil.rmtree(debs)
    return 0


def _command(artifact: Artifact, staging: Path) -> list[str]:
    if artifact.packages:
        go = _require_tool(artifact, "go", "install Go 1.24 or newer")
        # `go build -o DIR/` with several main packages writes one binary each;
        # with one package the name comes from the last path element.
        output = (
            f"{staging}/"
            if len(artifact.packages) > 1
            else str(staging / (artifact.binary or artifact.name))
        )
        return [
            go,
            "build",
            "-trimpath",
            "-ldflags",
            artifact.ldflags,
            "-o",
            output,
            *artifact.packages,
        ]
    _require_tool(artifact, "java", "install a JDK 17 or newer")
    mvn = _require_tool(artifact, "mvn", "install Apache Maven")
    return [
        mvn, "-q", "-B", "-f", str(artifact.source / "pom.xml"),
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={staging / 'libs'}",
    ]  # fmt: skip


def _copy_module_files(artifact: Artifact, staging: Path, env: dict[str, str], out: IO[str]) -> int:
    """Copy `artifact.module_files` out of the module cache the build just filled."""
    go = _require_tool(artifact, "go", "install Go 1.24 or newer")
    for module, relative in artifact.module_files:
        found = subprocess.run(
            [go, "list", "-m", "-f", "{{.Dir}}", module],
            cwd=artifact.source, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if found.returncode != 0:
            out.write(found.stderr)
            return found.returncode
        shutil.copyfile(Path(found.stdout.strip()) / relative, staging / Path(relative).name)
    return 0


def ensure(artifact: Artifact, *, say: bool = True) -> Path:
    """Build `artifact` unless the cache already holds it; returns its directory."""
    target = artifact.directory
    if (target / ".complete").exists():
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    log = _build_log(artifact)
    if say:
        print(
            f"  building {artifact.name} {artifact.version} (first time only; log: {log})",
            flush=True,
        )
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
    started = time.monotonic()
    with log.open("w") as out:
        if artifact.debian:
            returncode = _fetch_debian(artifact, staging, out)
        else:
            returncode = subprocess.run(
                _command(artifact, staging),
                cwd=artifact.source,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            ).returncode
        if returncode == 0 and artifact.module_files:
            returncode = _copy_module_files(artifact, staging, env, out)
    if returncode != 0:
        raise StackError(artifact.name, f"build failed with exit code {returncode}", log)
    (staging / ".complete").write_text(f"built in {time.monotonic() - started:.0f}s\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    for stale in target.parent.glob(f"{artifact.name}-*"):
        if stale != target:  # builds of other versions or wrapper revisions
            shutil.rmtree(stale, ignore_errors=True)
    if say:
        print(f"  built {artifact.name} in {time.monotonic() - started:.0f}s", flush=True)
    return target


CONSOLE_SOURCE = layout.REPO_ROOT / "console"
#: What the console's build reads: a change to any of it is a new build.
_CONSOLE_INPUTS = ("package.json", "package-lock.json", "tsconfig.json", "vite.config.ts",
                   "index.html", "src", "public")  # fmt: skip


#: Earlier console builds kept beside the current one.
KEPT_CONSOLE_BUILDS = 3
#: Bumped when console_build changes what it makes from the same sources.
_CONSOLE_RECIPE = b"2: gzipped assets"


def console_directory() -> Path:
    """Where the console built from the current sources lives (built or not)."""
    digest = hashlib.sha256(_CONSOLE_RECIPE)
    for name in _CONSOLE_INPUTS:
        path = CONSOLE_SOURCE / name
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file():
                digest.update(str(file.relative_to(CONSOLE_SOURCE)).encode())
                digest.update(file.read_bytes())
    return layout.cache_dir() / "console" / digest.hexdigest()[:12]


def console_build(*, say: bool = True) -> Path:
    """Build the web console with npm (packages from the npm registry, locked by
    package-lock.json) unless this version of its sources is built already."""
    target = console_directory()
    if (target / ".complete").exists():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise StackError("console", "`npm` is not on PATH; install Node.js 20 or newer")
    log = layout.cache_dir() / "build-logs" / "console.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    if say:
        print(f"  building the web console (log: {log})", flush=True)
    started = time.monotonic()
    # `npm install --no-save` installs what package-lock.json pins and writes nothing:
    # `npm ci` refuses a lock that lists only the platform packages the registry mirror
    # serves (rollup's and esbuild's native builds for this machine).
    steps = (
        [npm, "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error"],
        [npm, "run", "build", "--", "--outDir", str(staging), "--emptyOutDir"],
    )
    with log.open("w") as out:
        for step in steps:
            done = subprocess.run(
                step, cwd=CONSOLE_SOURCE, stdout=out, stderr=subprocess.STDOUT, check=False
            )
            if done.returncode != 0:
                raise StackError(
                    "console", f"`npm {' '.join(step[1:3])}` failed ({done.returncode})", log
                )
    for asset in (staging / "assets").iterdir():
        # The gateway sends these to browsers that accept gzip (console_site.py).
        asset.with_name(asset.name + ".gz").write_bytes(gzip.compress(asset.read_bytes(), 9))
    (staging / ".complete").write_text(f"built in {time.monotonic() - started:.0f}s\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    # Builds of earlier sources: the last few stay, since a gateway still running serves
    # the one it started with until it restarts.
    earlier = sorted(
        (build for build in target.parent.iterdir() if build != target),
        key=lambda build: build.stat().st_mtime, reverse=True,
    )  # fmt: skip
    for stale in earlier[KEPT_CONSOLE_BUILDS:]:
        shutil.rmtree(stale, ignore_errors=True)
    if say:
        print(f"  built the web console in {time.monotonic() - started:.0f}s", flush=True)
    return target


def ensure_all(*, say: bool = True) -> None:
    for artifact in (*ALL, *object_store_artifacts()):
        ensure(artifact, say=say)
    console_build(say=say)

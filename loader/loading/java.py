"""What Spark needs to run here, checked before anything starts: a Java 17+ runtime and the
pyspark package. Said plainly, instead of a JVM's or an import's stack trace."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

from loader.core.errors import StartError


class JavaError(RuntimeError, StartError):
    """No Java runtime Spark can run on, or no pyspark to run it."""


def java_major() -> int | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> int:
    major = java_major()
    if major is None:
        raise JavaError(
            "Java not found: Spark needs Java 17 or newer (apt install openjdk-17-jre-headless, or set JAVA_HOME)"
        )
    if major < 17:
        raise JavaError(f"Java {major} found; Spark 4 needs Java 17 or newer (apt install openjdk-17-jre-headless)")
    return major


def check_runtime() -> int:
    """Java (its major version returned) and the pyspark package with its Connect client."""
    major = check_java()
    for module, what in (("pyspark", "pyspark"), ("grpc", "pyspark[connect]'s gRPC client")):
        if importlib.util.find_spec(module) is None:
            raise JavaError(
                f"{what} is not installed in this Python ({module} cannot be imported); run ./scripts/setup, "
                "or pip install the project into this environment"
            )
    return major

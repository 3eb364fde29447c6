"""Java check: Spark needs a Java 17+ runtime; say so plainly instead of a JVM stack trace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess


class JavaError(RuntimeError):
    pass


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

"""The destructive-command tier: which tool calls could do damage that no retry undoes.

    classify_call("Bash", {"command": "rm -rf ~/"})      -> Verdict(tier="destructive", rule="delete_outside_workspace", ...)
    classify_command("rm -rf ./build")                    -> None

Pure functions, no I/O. Shell commands are tokenised (quotes respected, so ``echo "rm -rf /"``
is an echo), split at ``;``, ``&&``, ``||``, ``|``, ``&`` and newlines, unwrapped from
``sudo``/``env``/``nohup``/``xargs`` and from ``sh -c``/``eval``, and each simple command is
checked against the rules below. docs/destructive.md lists the rules and the look-alikes
that deliberately pass.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass

TIER = "destructive"
DEFAULT_WORKSPACE = "/work"

SEPARATORS = {";", "&&", "||", "|", "|&", "&", "\n", "(", ")", "<(", "$(", "{", "}", "`"}
WRAPPERS = set(
    "sudo doas env nohup nice ionice time timeout exec command builtin xargs stdbuf chronic setsid".split()
)
PUNCTUATION = set("();<>|&")
OPTIONS_WITH_VALUE = set(
    "-u -g -U -C -D -p -I -n -P -L -s -k -E -a -d --user --group --signal --chdir".split()
)
SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "busybox"}
INTERPRETERS = SHELLS | {"python", "python3", "perl", "ruby", "node", "php"}
DOWNLOADERS = {"curl", "wget", "fetch"}
SQL_CLIENTS = {"psql", "mysql", "mariadb", "sqlite3", "sqlcmd", "clickhouse-client", "cockroach", "duckdb"}
SQL_DESTRUCTIVE = re.compile(r"\b(drop\s+(table|database|schema)|truncate\s+(table\s+)?\w)", re.IGNORECASE)
REDIS_DESTRUCTIVE = re.compile(r"^(flushall|flushdb)$", re.IGNORECASE)
FORK_BOMB = re.compile(r"(\S+)\s*\(\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}\s*;\s*\1")
DISK_TOOLS = {"mkfs", "mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "parted", "sgdisk", "cfdisk"}
POWER = {"shutdown", "reboot", "halt", "poweroff"}
HARMLESS_DEVICES = re.compile(r"^/dev/(null|zero|stdout|stderr|stdin|tty|u?random|fd/\d+)$")
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/sbin",
    "/srv",
    "/sys",
    "/usr",
    "/var",
)
SCRATCH_DIRS = ("/tmp", "/var/tmp")
HOME_SECRETS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".config",
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".gitconfig",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".docker",
    ".kube",
)
FILE_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
SHELL_INPUT_KEYS = ("command", "cmd")


@dataclass(frozen=True)
class Verdict:
    rule: str
    reason: str
    tier: str = TIER

    def as_dict(self) -> dict[str, str]:
        return {"tier": self.tier, "rule": self.rule, "reason": self.reason}


@dataclass(frozen=True)
class Where:
    """Where the command runs: relative paths resolve against the workspace."""

    workspace: str = DEFAULT_WORKSPACE

    def place(self, raw: str) -> str | None:
        """What a path names: 'root', 'home', 'workspace-root', 'system', 'scratch', 'workspace' or 'outside'."""
        path = raw.strip()
        if not path:
            return None
        if path in ("~", "$HOME", "${HOME}") or re.match(r"^(~|\$HOME|\$\{HOME\})/+[*.]?$", path):
            return "home"
        if re.match(r"^(~|\$HOME|\$\{HOME\})/", path):
            return "home-file"
        if path.startswith(("~", "$")):
            return None  # another user's home or an unknown variable: not resolvable here
        full = posixpath.normpath(posixpath.join(self.workspace, path.rstrip("*") or "."))
        if full == "/":
            return "root"
        if full in ("/root", "/home") or re.fullmatch(r"/home/[^/]+", full):
            return "home"
        workspace = posixpath.normpath(self.workspace)
        if full == workspace:
            return "workspace-root"
        if full.startswith(workspace + "/"):
            return "workspace"
        if any(full == d or full.startswith(d + "/") for d in SCRATCH_DIRS):
            return "scratch"
        if any(full == d or full.startswith(d + "/") for d in SYSTEM_DIRS):
            return "system"
        return "outside"


def classify_call(tool: str, tool_input: object, workspace: str = DEFAULT_WORKSPACE) -> Verdict | None:
    """The verdict for one tool call the model asks for: a shell command or a file write."""
    if not isinstance(tool_input, dict):
        return None
    where = Where(workspace)
    if tool in FILE_TOOLS:
        return _file_write(tool, tool_input.get(FILE_TOOLS[tool]), where)
    for key in SHELL_INPUT_KEYS:
        command = tool_input.get(key)
        if isinstance(command, list) and all(isinstance(part, str) for part in command):
            command = shlex.join(command)
        if isinstance(command, str):
            return classify_command(command, workspace)
    return None


def classify_command(command: str, workspace: str = DEFAULT_WORKSPACE) -> Verdict | None:
    return _classify(command, Where(workspace), depth=0)


def _classify(command: str, where: Where, depth: int) -> Verdict | None:
    if FORK_BOMB.search(command):
        return Verdict("fork_bomb", "a fork bomb exhausts the machine's processes")
    tokens = _tokens(command)
    verdict = _shell_reads_download(tokens)
    if verdict:
        return verdict
    for pipeline in _pipelines(tokens):
        verdict = _pipe_into_shell(pipeline) or _sql_through_pipe(pipeline)
        if verdict:
            return verdict
        for words in pipeline:
            verdict = _simple_command(words, where, depth)
            if verdict:
                return verdict
    return None


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace = " \t\r"
    lexer.wordchars += "+:@%,^${}[]!"
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: judge the plain words
        return command.split()


def _pipelines(tokens: list[str]) -> Iterator[list[list[str]]]:
    """Pipelines (lists of simple commands); redirections stay inside their command."""
    pipeline: list[list[str]] = []
    words: list[str] = []
    for token in tokens:
        if token in ("|", "|&"):
            pipeline.append(words)
            words = []
        elif token in SEPARATORS or set(token) <= PUNCTUATION and ("(" in token or ")" in token):
            pipeline.append(words)
            yield [w for w in pipeline if w]
            pipeline, words = [], []
        else:
            words.append(token)
    pipeline.append(words)
    yield [w for w in pipeline if w]


def _unwrap(words: list[str]) -> list[str]:
    """The command behind sudo, env VAR=x, nohup, timeout 5, xargs -0 ..."""
    i = 0
    while i < len(words):
        word = words[i]
        name = posixpath.basename(word)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
            i += 1
        elif name in WRAPPERS:
            i += 1
            while i < len(words) and (words[i].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?", words[i])):
                i += 2 if words[i] in OPTIONS_WITH_VALUE else 1
        else:
            break
    rest = words[i:]
    return [posixpath.basename(rest[0]), *rest[1:]] if rest else []


def _command_name(words: list[str]) -> str:
    unwrapped = _unwrap(words)
    return unwrapped[0] if unwrapped else ""


def _pipe_into_shell(pipeline: list[list[str]]) -> Verdict | None:
    names = [_command_name(words) for words in pipeline]
    for i, name in enumerate(names):
        if name in DOWNLOADERS and any(later in INTERPRETERS for later in names[i + 1 :]):
            return Verdict(
                "download_piped_to_shell", f"{name} output is piped into {names[-1]} and run unread"
            )
    return None


def _shell_reads_download(tokens: list[str]) -> Verdict | None:
    """``bash <(curl ...)``: a shell runs a process substitution fed by a download."""
    for i, token in enumerate(tokens[1:-1], start=1):
        if token == "<(" and posixpath.basename(tokens[i + 1]) in DOWNLOADERS:
            start = max((j + 1 for j in range(i) if tokens[j] in SEPARATORS), default=0)
            if _command_name(tokens[start:i]) in INTERPRETERS:
                return Verdict("download_piped_to_shell", f"{tokens[i + 1]} output is run by a shell unread")
    return None


def _sql_through_pipe(pipeline: list[list[str]]) -> Verdict | None:
    names = [_command_name(words) for words in pipeline]
    if len(pipeline) > 1 and any(n in SQL_CLIENTS for n in names[1:]):
        text = " ".join(" ".join(words) for words in pipeline[:-1])
        if SQL_DESTRUCTIVE.search(text):
            return Verdict("sql_drop", "SQL that drops or truncates data is piped into a database client")
    return None


def _simple_command(words: list[str], where: Where, depth: int) -> Verdict | None:
    args = _unwrap(words)
    if not args:
        return None
    verdict = _redirect_target(args, where)
    if verdict:
        return verdict
    name, rest = args[0], args[1:]
    if name.startswith("mkfs") or name in DISK_TOOLS:
        return Verdict("disk_wipe", f"{name} rewrites a disk or partition table")
    check = RULES.get(name)
    if check:
        verdict = check(rest, where)
        if verdict:
            return verdict
    if depth < 3:
        script = _inner_script(name, rest)
        if script is not None:
            if name in SHELLS and re.search(r"\$\(\s*(curl|wget|fetch)\b|`\s*(curl|wget|fetch)\b", script):
                return Verdict("download_piped_to_shell", f"{name} -c runs a downloaded script unread")
            return _classify(script, where, depth + 1)
    return None


def _inner_script(name: str, rest: list[str]) -> str | None:
    """The command text a shell (-c), eval, or a remote shell would run."""
    if name == "eval":
        return " ".join(rest)
    if name in SHELLS:
        for i, arg in enumerate(rest):
            if re.fullmatch(r"-[a-z]*c[a-z]*", arg) and i + 1 < len(rest):
                return rest[i + 1]
    return None


def _redirect_target(args: list[str], where: Where) -> Verdict | None:
    for i, word in enumerate(args[:-1]):
        if word in (">", ">|", "&>"):  # overwrites; appending (>>) is left alone
            target = args[i + 1]
            if target.startswith("/dev/") and not HARMLESS_DEVICES.match(target):
                return Verdict("disk_wipe", f"output is written straight to the device {target}")
            if _is_sensitive(target, where):
                return Verdict("overwrite_system_file", f"output overwrites {target}")
    return None


def _is_sensitive(path: str, where: Where) -> bool:
    if HARMLESS_DEVICES.match(path):
        return False
    place = where.place(path)
    if place == "system":
        return True
    if place == "home-file":
        first = re.sub(r"^(~|\$HOME|\$\{HOME\})/+", "", path).split("/", 1)[0]
        return first in HOME_SECRETS
    return place in ("root", "home")


def _options(rest: list[str]) -> tuple[set[str], list[str]]:
    """Short flags as single letters plus long flags, and the operands (after ``--`` all are operands)."""
    flags: set[str] = set()
    operands: list[str] = []
    ended = False
    for arg in rest:
        if ended or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif arg == "--":
            ended = True
        elif arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        else:
            flags.update(arg[1:])
    return flags, operands


def _rm(rest: list[str], where: Where) -> Verdict | None:
    flags, targets = _options(rest)
    recursive = bool(flags & {"r", "R", "--recursive"})
    return _delete_targets("rm", targets, recursive, where)


def _delete_targets(name: str, targets: list[str], recursive: bool, where: Where) -> Verdict | None:
    for target in targets:
        place = where.place(target)
        if place in ("root", "home", "workspace-root"):
            what = {
                "root": "the root file system",
                "home": "a home directory",
                "workspace-root": "the whole workspace",
            }[place]
            return Verdict("delete_outside_workspace", f"{name} deletes {what} ({target})")
        if place == "system" or (place == "home-file" and _is_sensitive(target, where)):
            return Verdict(
                "delete_outside_workspace", f"{name} deletes the system or credential path {target}"
            )
        if recursive and place in ("outside", "home-file"):
            return Verdict(
                "delete_outside_workspace",
                f"{name} recursively deletes {target}, outside the workspace {where.workspace}",
            )
    return None


def _find(rest: list[str], where: Where) -> Verdict | None:
    deletes = "-delete" in rest or any(
        a in ("-exec", "-execdir")
        and i + 1 < len(rest)
        and posixpath.basename(rest[i + 1]) in ("rm", "shred")
        for i, a in enumerate(rest)
    )
    if not deletes:
        return None
    roots = []
    for arg in rest:
        if arg.startswith(("-", "(", "!")):
            break
        roots.append(arg)
    # find deletes only what its tests select, so a filtered walk of the workspace is fine
    roots = [r for r in roots or ["."] if where.place(r) != "workspace-root"]
    return _delete_targets("find", roots, True, where)


def _chmod_chown(name: str) -> Callable[[list[str], Where], Verdict | None]:
    def check(rest: list[str], where: Where) -> Verdict | None:
        flags, operands = _options(rest)
        recursive = bool(flags & {"R", "--recursive"})
        for path in operands[1:]:
            place = where.place(path)
            if place in ("root", "home") or recursive and _is_sensitive(path, where):
                return Verdict(
                    "permission_wreck",
                    f"{name} {'-R ' if recursive else ''}changes ownership or modes of {path}",
                )
        return None

    return check


def _dd(rest: list[str], where: Where) -> Verdict | None:
    for arg in rest:
        if arg.startswith("of="):
            target = arg[3:]
            if target.startswith("/dev/") and not HARMLESS_DEVICES.match(target):
                return Verdict("disk_wipe", f"dd writes straight to the device {target}")
            if _is_sensitive(target, where):
                return Verdict("overwrite_system_file", f"dd overwrites {target}")
    return None


def _shred(rest: list[str], where: Where) -> Verdict | None:
    _, targets = _options(rest)
    for target in targets:
        if target.startswith("/dev/") and not HARMLESS_DEVICES.match(target) or _is_sensitive(target, where):
            return Verdict("disk_wipe", f"shred destroys {target}")
    return None


def _git(rest: list[str], where: Where) -> Verdict | None:
    i = 0
    while i < len(rest) and rest[i].startswith("-"):  # git -C dir -c k=v <subcommand>
        i += 2 if rest[i] in ("-C", "-c", "--git-dir", "--work-tree") else 1
    if i >= len(rest):
        return None
    sub, args = rest[i], rest[i + 1 :]
    flags, operands = _options(args)
    if sub == "push":
        if flags & {"f", "--force", "--mirror"} or any(op.startswith("+") for op in operands):
            return Verdict("git_force_push", "git push --force overwrites the remote branch's history")
        if flags & {"d", "--delete"} or any(op.startswith(":") and len(op) > 1 for op in operands):
            return Verdict("git_force_push", "git push deletes a remote branch")
    if sub == "reset" and "--hard" in flags:
        return Verdict("git_hard_reset", "git reset --hard throws away uncommitted work")
    if sub == "clean" and flags & {"f", "--force"} and not flags & {"n", "--dry-run"}:
        return Verdict("git_hard_reset", "git clean -f deletes untracked files for good")
    return None


def _sql_client(rest: list[str], where: Where) -> Verdict | None:
    if SQL_DESTRUCTIVE.search(" ".join(rest)):
        return Verdict("sql_drop", "SQL that drops or truncates data is sent to a database")
    return None


def _dropdb(rest: list[str], where: Where) -> Verdict | None:
    return Verdict("sql_drop", "dropdb deletes a database")


def _redis(rest: list[str], where: Where) -> Verdict | None:
    if any(REDIS_DESTRUCTIVE.match(arg) for arg in rest):
        return Verdict("sql_drop", "redis FLUSHALL/FLUSHDB deletes every key")
    return None


def _power(rest: list[str], where: Where) -> Verdict | None:
    return Verdict("system_halt", "the machine is shut down or rebooted")


def _kill(rest: list[str], where: Where) -> Verdict | None:
    if "-1" in rest[1:]:
        return Verdict("system_halt", "kill -1 signals every process the user may signal")
    return None


def _mv(rest: list[str], where: Where) -> Verdict | None:
    _, operands = _options(rest)
    if len(operands) >= 2 and operands[-1] == "/dev/null":
        return Verdict("delete_outside_workspace", "mv into /dev/null destroys the source")
    return _delete_targets("mv", operands[:-1], False, where) if len(operands) >= 2 else None


def _systemctl(rest: list[str], where: Where) -> Verdict | None:
    if any(arg in POWER or arg in ("kexec", "suspend", "hibernate") for arg in rest):
        return Verdict("system_halt", "systemctl stops the machine")
    return None


RULES: dict[str, Callable[[list[str], Where], Verdict | None]] = {
    "rm": _rm,
    "unlink": _rm,
    "find": _find,
    "mv": _mv,
    "chmod": _chmod_chown("chmod"),
    "chown": _chmod_chown("chown"),
    "chgrp": _chmod_chown("chgrp"),
    "dd": _dd,
    "shred": _shred,
    "git": _git,
    **{client: _sql_client for client in SQL_CLIENTS},
    "dropdb": _dropdb,
    "redis-cli": _redis,
    **{name: _power for name in POWER},
    "kill": _kill,
    "systemctl": _systemctl,
}


def _file_write(tool: str, path: object, where: Where) -> Verdict | None:
    if isinstance(path, str) and _is_sensitive(path, where):
        return Verdict("overwrite_system_file", f"{tool} changes {path}, a system or credential file")
    return None

"""Sphinx directives that build dfgnn's reference pages from their sources, so the docs cannot drift:

- ``.. dfgnn-c-header:: PATH`` renders the public C header (runtime/include/dfgnn/dfgnn.h) as
  C-domain entries (functions, enums, structs with members, macros, handle types), with the
  header's own comments as their descriptions and its ``/* ---- name */`` banners as sections.
- ``.. dfgnn-help:: TOOL`` runs ``TOOL --help`` from the built tools (``$DFGNN_TOOLS_DIR``, else
  ``build/tools`` of the repository) and shows its output; a missing tool is an error naming it.
- A completeness check: every public name of the modules in ``dfgnn_api_modules`` (their
  ``__all__``, else the functions and classes they define) and the ``forward`` of every layer
  must be documented somewhere, with a docstring where the object is Python code; a gap is a
  warning (an error under ``-W``).

The header parser knows the shapes dfgnn.h uses (it is plain C written to one style) and fails
loudly on anything else rather than dropping a declaration.
"""

import importlib
import inspect
import os
import re
import subprocess
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- C header -> C-domain reST

_BANNER = re.compile(r"^/\* -{8,} (.+?) \*/$")
_IDENT = re.compile(r"\b(?:dfgnn|DFGNN_)\w*\b")
_SPECIAL = re.compile(r"([\\*`|_])")
_OPEN = "-:/'\"<([{"
_CLOSE = "-.,:;!?\\/'\")]}>"


class HeaderError(Exception):
    pass


def _comment_lines(text):
    """The lines of a /* ... */ comment without the delimiters and the ' * ' margin."""
    body = text.strip()[2:-2]
    lines = body.split("\n")
    out = []
    for line in lines:
        line = line.rstrip()
        stripped = line.lstrip()
        if stripped.startswith("* ") or stripped == "*":
            line = stripped[2:]
        elif stripped.startswith("*"):
            line = stripped[1:]
        else:
            line = line.strip() if not out else line
        out.append(line)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


class _Inline:
    """Comment prose as inline reST: special characters escaped, and names the header declares
    turned into cross-references."""

    def __init__(self, roles):
        self.roles = roles  # name -> role ("func", "type", "macro", "enumerator", "member")

    def __call__(self, text):
        out, pos = [], 0
        for m in _IDENT.finditer(text):
            out.append(_SPECIAL.sub(r"\\\1", text[pos:m.start()]))
            name, end = m.group(0), m.end()
            role = self.roles.get(name)
            if role is None:
                out.append(_SPECIAL.sub(r"\\\1", name))
            else:
                if role == "func" and text.startswith("()", end):
                    end += 2  # the role adds the parentheses
                before = text[m.start() - 1:m.start()]
                after = text[end:end + 1]
                # inline markup must stand apart from the surrounding words: escaped spaces join it
                out.append(("\\ " if before and not (before.isspace() or before in _OPEN) else "") +
                           f":c:{role}:`{name}`" + ("\\ " if after and not (after.isspace() or after in _CLOSE)
                                                     else ""))
            pos = end
        out.append(_SPECIAL.sub(r"\\\1", text[pos:]))
        return "".join(out)


def _render_comment(lines, inline):
    """reST for a comment: bullet items ('- ') and paragraphs joined into lines; a comment laid
    out in aligned columns (an indented line outside a bullet) is shown as a literal block."""
    bullet = False
    for line in lines:
        if line.startswith("- "):
            bullet = True
        elif line[:1].isspace() and not bullet:
            return ["::", ""] + ["   " + line for line in lines] + [""]
        elif not line.strip():
            bullet = False
    out, para = [], []

    def flush():
        if para:
            text = inline(" ".join(p.strip() for p in para))
            out.extend(["- " + text[2:] if para[0].startswith("- ") else text, ""])
            para.clear()

    for line in lines:
        if not line.strip():
            flush()
        elif line.startswith("- ") or (para and para[0].startswith("- ") and not line[:1].isspace()):
            flush()
            para.append(line)
        else:
            para.append(line)
    flush()
    return out


class _Header:
    """dfgnn.h as a list of items: ('section', title), ('text', comment lines) and
    ('decl', kind, data, comment lines)."""

    def __init__(self, text):
        self.items = []
        self._parse(text)

    def _parse(self, text):
        # Tokens: comments, preprocessor lines, blank lines, and code up to a top-level ';'.
        pos, n = 0, len(text)
        pending = None  # a comment waiting for the declaration it describes
        first = True
        last_decl = None
        while pos < n:
            if text.startswith("/*", pos):
                end = text.index("*/", pos) + 2
                comment, start, pos = text[pos:end], pos, end
                blank_before = text[:start].endswith("\n\n")
                blank_after = text.startswith("\n\n", pos)
                banner = _BANNER.match(comment)
                if banner:
                    self._flush(pending)
                    pending = None
                    self.items.append(("section", banner.group(1)))
                elif first:
                    self.items.append(("intro", _comment_lines(comment)))
                elif blank_after and not blank_before and pending is None and last_decl is not None:
                    # a note right below a declaration, standing alone: it belongs to that declaration
                    last_decl[3].extend([""] + _comment_lines(comment))
                else:
                    pending = (pending + [""] if pending else []) + _comment_lines(comment)
                    if blank_after:  # a free-standing comment: a paragraph of its own
                        self.items.append(("text", pending))
                        pending = None
                first = False
                continue
            if text[pos].isspace():
                pos += 1
                continue
            if text[pos] == "#":
                end = text.find("\n", pos)
                end = n if end < 0 else end
                line = text[pos:end]
                # every #define with a value is public, except the export macro
                m = re.match(r"#define (\w+)\s+(.+)$", line)
                if m and m.group(1) != "DFGNN_API":
                    decl = ("decl", "macro", {"name": m.group(1), "value": m.group(2)}, pending or [])
                    self.items.append(decl)
                    last_decl, pending = decl, None
                pos = end
                continue
            if text.startswith("extern", pos) or text.startswith("}", pos):  # extern "C" { ... }
                pos = text.find("\n", pos)
                pos = n if pos < 0 else pos
                continue
            end = self._statement_end(text, pos)
            decl = ("decl",) + self._declaration(text[pos:end]) + (pending or [],)
            self.items.append(decl)
            last_decl, pending = decl, None
            pos = end + 1
        self._flush(pending)

    def _flush(self, pending):
        if pending:
            self.items.append(("text", pending))

    @staticmethod
    def _statement_end(text, pos):
        depth, i = 0, pos
        while i < len(text):
            c = text[i]
            if text.startswith("/*", i):
                i = text.index("*/", i) + 2
                continue
            if c in "{(":
                depth += 1
            elif c in "})":
                depth -= 1
            elif c == ";" and depth == 0:
                return i
            i += 1
        raise HeaderError(f"unterminated declaration at: {text[pos:pos + 80]!r}")

    def _declaration(self, code):
        code = code.strip()
        if code.startswith("DFGNN_API "):
            sig = " ".join(code[len("DFGNN_API "):].split())
            sig = sig.replace("( ", "(").replace(" )", ")")
            return "function", {"signature": sig}
        m = re.match(r"typedef struct (\w+)\s*\*\s*(\w+)$", code)
        if m:
            return "handle", {"struct": m.group(1), "name": m.group(2)}
        m = re.match(r"typedef enum (\w+)\s*\{(.*)\}\s*(\w+)$", code, re.S)
        if m:
            return "enum", {"tag": m.group(1), "name": m.group(3), "items": self._members(m.group(2), ",")}
        m = re.match(r"enum\s*\{(.*)\}$", code, re.S)
        if m:
            return "constants", {"items": self._members(m.group(1), ",")}
        m = re.match(r"typedef struct (\w+)\s*\{(.*)\}\s*(\w+)$", code, re.S)
        if m:
            return "struct", {"tag": m.group(1), "name": m.group(3), "items": self._members(m.group(2), ";")}
        raise HeaderError(f"dfgnn-c-header: a declaration of an unknown shape: {code[:120]!r}")

    @staticmethod
    def _members(body, sep):
        """(declaration, comment lines) of enumerators or struct members; a comment before an item or
        on its line describes it."""
        items, pending, pos = [], [], 0
        while pos < len(body):
            if body[pos].isspace():
                pos += 1
                continue
            if body.startswith("/*", pos):
                end = body.index("*/", pos) + 2
                lines = _comment_lines(body[pos:end])
                line_start = body.rfind("\n", 0, pos) + 1
                if items and body[line_start:pos].strip():  # trailing comment on an item's line
                    items[-1][1].extend(lines)
                else:
                    pending += ([""] if pending else []) + lines
                pos = end
                continue
            end = pos
            while end < len(body) and body[end] != sep and not body.startswith("/*", end):
                end += 1
            decl = " ".join(body[pos:end].split())
            if decl:
                items.append((decl, pending))
                pending = []
            pos = end + 1 if end < len(body) and body[end] == sep else end
        return items

    def roles(self):
        roles = {}
        for item in self.items:
            if item[0] != "decl":
                continue
            kind, data = item[1], item[2]
            if kind == "function":
                roles[re.search(r"(\w+)\(", data["signature"]).group(1)] = "func"
            elif kind in ("enum", "struct", "handle"):
                roles[data["name"]] = {"enum": "enum", "struct": "struct", "handle": "type"}[kind]
                if kind == "enum":
                    for decl, _ in data["items"]:
                        roles[decl.split("=")[0].strip()] = "enumerator"
            elif kind == "constants":
                for decl, _ in data["items"]:
                    roles[decl.split("=")[0].strip()] = "macro"
            elif kind == "macro":
                roles[data["name"]] = "macro"
        return roles


def header_to_rst(text):
    """reST lines for the C header text."""
    header = _Header(text)
    inline = _Inline(header.roles())
    out = []

    def body(lines, indent="   "):
        return [indent + line if line else "" for line in _render_comment(lines, inline)]

    for item in header.items:
        kind = item[0]
        if kind == "intro":
            # a short line that introduces a list ("Conventions") becomes a heading of its own
            intro = _render_comment(item[1], inline)
            for i, line in enumerate(intro):
                following = next((x for x in intro[i + 1:] if x), "")
                if line and not line.startswith("- ") and line[-1] not in ".:;" and following.startswith("- "):
                    intro[i] = f".. rubric:: {line}"
            out += intro
        elif kind == "section":
            title = item[1][:1].upper() + item[1][1:]
            out += [title, "-" * len(title), ""]
        elif kind == "text":
            out += _render_comment(item[1], inline)
        else:
            _, what, data, comment = item
            if what == "function":
                out += [f".. c:function:: {data['signature']}", ""] + body(comment)
            elif what == "handle":
                out += [f".. c:type:: {data['name']}", "",
                        f"   Opaque handle: ``typedef struct {data['struct']}* {data['name']};``", ""] + body(comment)
            elif what == "macro":
                out += [f".. c:macro:: {data['name']}", "", f"   Defined as ``{data['value']}``.", ""] + body(comment)
            elif what == "constants":
                out += body(comment, "")
                for decl, lines in data["items"]:
                    name, _, value = (p.strip() for p in decl.partition("="))
                    out += [f".. c:macro:: {name}", "", f"   Value ``{value}``.", ""] + body(lines)
            elif what == "enum":
                out += [f".. c:enum:: {data['name']}", "",
                        f"   ``typedef enum {data['tag']} {{ ... }} {data['name']};``", ""] + body(comment)
                for decl, lines in data["items"]:
                    out += [f"   .. c:enumerator:: {decl}", ""] + body(lines, "      ")
            elif what == "struct":
                out += [f".. c:struct:: {data['name']}", "",
                        f"   ``typedef struct {data['tag']} {{ ... }} {data['name']};``", ""] + body(comment)
                for decl, lines in data["items"]:
                    # "double p50, p90, p99, p999" declares four members
                    m = re.match(r"(.*?\b)(\w+(?:\[\w+\])?(?:\s*,\s*\w+(?:\[\w+\])?)+)$", decl)
                    names = [decl] if m is None else [m.group(1) + v.strip() for v in m.group(2).split(",")]
                    for member in names:
                        out += [f"   .. c:member:: {member}", ""]
                        out += body(lines, "      ")
                        lines = []  # a shared comment is shown once, under the first member
    return out


class CHeaderDirective(SphinxDirective):
    required_arguments = 1

    def run(self):
        path = (Path(self.env.srcdir) / self.arguments[0]).resolve()
        self.env.note_dependency(str(path))
        try:
            lines = header_to_rst(path.read_text())
        except (OSError, HeaderError) as e:
            raise self.error(f"dfgnn-c-header: {e}") from None
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, str(path)), node)
        return node.children


# ---------------------------------------------------------------- CLI --help output

def tools_dir():
    return Path(os.environ.get("DFGNN_TOOLS_DIR") or REPO / "build" / "tools")


class HelpDirective(SphinxDirective):
    required_arguments = 1

    def run(self):
        tool = tools_dir() / self.arguments[0]
        if not os.access(tool, os.X_OK):
            raise self.error(f"dfgnn-help: {tool} is not built: build the tools (tools/setup.sh, or cmake --build "
                             f"build) or point DFGNN_TOOLS_DIR at the directory that holds {tool.name}")
        try:
            run = subprocess.run([str(tool), "--help"], capture_output=True, text=True, timeout=60,
                                 env=dict(os.environ, DFGNN_LOG_LEVEL="off"))
        except (OSError, subprocess.TimeoutExpired) as e:
            raise self.error(f"dfgnn-help: {tool} --help failed to run: {e}") from None
        if run.returncode != 0:
            raise self.error(f"dfgnn-help: {tool} --help exited with {run.returncode}: {run.stderr.strip()}")
        text = run.stdout.rstrip()
        block = nodes.literal_block(text, text)
        block["language"] = "none"
        return [block]


# ---------------------------------------------------------------- every public name documented

def public_names(module):
    """(qualified name, object) of a module's public API: its __all__ (submodules left out), else
    the functions and classes it defines; for each class that is a torch.nn.Module, its forward."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and
                 (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == module.__name__]
    out = []
    for name in names:
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            continue
        out.append((f"{module.__name__}.{name}", obj))
        if inspect.isclass(obj) and any(c.__name__ == "Module" and c.__module__.startswith("torch.nn")
                                        for c in obj.__mro__):
            out.append((f"{module.__name__}.{name}.forward", obj.forward))
    return out


def check_api_documented(app, env):
    log = logging.getLogger(__name__)
    documented = set(env.get_domain("py").objects)
    for module_name in app.config.dfgnn_api_modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            log.warning(f"dfgnn API check: cannot import {module_name}: {e}")
            continue
        for name, obj in public_names(module):
            if name not in documented:
                log.warning(f"dfgnn API check: {name} is public but documented on no page")
            elif (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", "").startswith(
                    "dfgnn.") and not obj.__module__.endswith("_dfgnn") and not (obj.__doc__ or "").strip():
                # (its own docstring: one inherited from torch, e.g. Module.forward's, says nothing here)
                log.warning(f"dfgnn API check: {name} has no docstring")


def setup(app):
    app.add_directive("dfgnn-c-header", CHeaderDirective)
    app.add_directive("dfgnn-help", HelpDirective)
    app.add_config_value("dfgnn_api_modules", [], "env")
    app.connect("env-check-consistency", check_api_documented)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Deterministic text workloads for the benchmarks, cut from the Python standard library's docstrings.

Every machine with the same Python version gets the same texts, with no data files:
- :func:`doc_chunks`: documentation-like paragraphs of 300-500 characters (about 100 tokens).
- :func:`sentences`: docstring sentences of 20-120 characters (about 20 tokens).
- :func:`varied_texts`: the accuracy set for int8 vs fp32: prose, code, lists, non-English, very short
  and degenerate texts, and texts over 256 tokens.
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
from functools import lru_cache
from pathlib import Path

__all__ = ["doc_chunks", "sentences", "code_snippets", "varied_texts", "QUERY"]

QUERY = "how do I configure the retry timeout for the client?"

_MODULES = sorted(
    [
        "argparse",
        "asyncio/base_events",
        "asyncio/streams",
        "asyncio/tasks",
        "collections/__init__",
        "concurrent/futures/_base",
        "configparser",
        "contextlib",
        "csv",
        "dataclasses",
        "datetime",
        "decimal",
        "difflib",
        "email/message",
        "enum",
        "fractions",
        "functools",
        "gettext",
        "heapq",
        "http/client",
        "http/cookiejar",
        "http/server",
        "imaplib",
        "inspect",
        "ipaddress",
        "json/decoder",
        "json/encoder",
        "logging/__init__",
        "logging/handlers",
        "mailbox",
        "multiprocessing/pool",
        "ntpath",
        "optparse",
        "pathlib",
        "pickle",
        "pprint",
        "pydoc",
        "random",
        "shutil",
        "smtplib",
        "socket",
        "socketserver",
        "statistics",
        "string",
        "subprocess",
        "tarfile",
        "tempfile",
        "textwrap",
        "threading",
        "tokenize",
        "traceback",
        "turtle",
        "typing",
        "unittest/case",
        "unittest/mock",
        "urllib/parse",
        "urllib/request",
        "uuid",
        "warnings",
        "zipfile/__init__",
    ]
)


def _stdlib_sources() -> list[tuple[str, str]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for name in _MODULES:
        p = root / f"{name}.py"
        if p.exists():
            out.append((name, p.read_text(encoding="utf-8", errors="replace")))
    return out


@lru_cache(maxsize=1)
def _docstrings() -> list[str]:
    docs: list[str] = []
    for _, src in _stdlib_sources():
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) > 40:
                    docs.append(d)
    return docs


@lru_cache(maxsize=4)
def doc_chunks(n: int = 151, seed: int = 1234) -> tuple[str, ...]:
    """``n`` paragraphs of 300-500 characters, whitespace folded, shuffled with ``seed``."""
    chunks: list[str] = []
    for d in _docstrings():
        buf = ""
        for para in re.split(r"\n\s*\n", d):
            para = " ".join(para.split())
            if not para:
                continue
            buf = f"{buf} {para}".strip()
            if len(buf) >= 300:
                chunks.append(buf[:500])
                buf = ""
    random.Random(seed).shuffle(chunks)
    if len(chunks) < n:
        raise RuntimeError(f"only {len(chunks)} chunks available, {n} asked")
    return tuple(chunks[:n])


@lru_cache(maxsize=4)
def sentences(n: int = 1000, seed: int = 1234) -> tuple[str, ...]:
    """``n`` distinct docstring sentences of 20-120 characters, shuffled with ``seed``."""
    seen: set[str] = set()
    out: list[str] = []
    for d in _docstrings():
        for s in re.split(r"(?<=[.!?])\s+", " ".join(d.split())):
            if 20 <= len(s) <= 120 and s not in seen:
                seen.add(s)
                out.append(s)
    random.Random(seed).shuffle(out)
    if len(out) < n:
        raise RuntimeError(f"only {len(out)} sentences available, {n} asked")
    return tuple(out[:n])


@lru_cache(maxsize=2)
def code_snippets(n: int = 40, seed: int = 7) -> tuple[str, ...]:
    """``n`` function bodies of 200-900 characters from the standard library's source."""
    out: list[str] = []
    for _, src in _stdlib_sources():
        lines = src.splitlines()
        tree = ast.parse(src)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.end_lineno:
                text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if 200 <= len(text) <= 900:
                    out.append(text)
    random.Random(seed).shuffle(out)
    return tuple(out[:n])


_NON_ENGLISH = (
    "Die Lieferung verzögert sich wegen eines Streiks im Hafen um etwa eine Woche.",
    "Wie kann ich meine Rechnungsadresse ändern, ohne die Bestellung zu stornieren?",
    "La mise à jour du logiciel échoue lorsque l'espace disque disponible est inférieur à deux gigaoctets.",
    "Pouvez-vous m'envoyer la facture au format PDF, s'il vous plaît ?",
    "El servidor devuelve un error 503 cuando hay demasiadas solicitudes simultáneas.",
    "La reunión de planificación se ha trasladado al jueves a las diez de la mañana.",
    "Il modulo di pagamento non accetta carte emesse al di fuori dell'Unione Europea.",
    "O relatório mensal mostra um aumento de doze por cento nas vendas online.",
    "De app crasht bij het openen van een foto die groter is dan twintig megabyte.",
    "Wniosek o zwrot należy złożyć w ciągu czternastu dni od otrzymania przesyłki.",
    "Сервер перезагружается каждую ночь в три часа по московскому времени.",
    "Пожалуйста, пришлите журнал ошибок и версию приложения.",
    "系统在高峰时段响应缓慢，我们正在增加服务器容量。",
    "请在提交之前运行所有单元测试，并更新变更日志。",
    "このエラーは設定ファイルの文字コードがUTF-8でない場合に発生します。",
    "会議の議事録を明日までに共有してください。",
    "서버 점검은 매주 일요일 새벽 두 시에 진행됩니다.",
    "يرجى إعادة تشغيل الجهاز بعد تثبيت التحديث الأمني.",
    "אנא שלחו את הקבלה המקורית יחד עם בקשת ההחזר.",
    "Sipariş numaranızı yazarsanız kargo durumunu kontrol edebilirim.",
    "कृपया अपना पासवर्ड रीसेट करने के लिए ईमेल में दिए गए लिंक पर क्लिक करें।",
    "Η πληρωμή απορρίφθηκε επειδή η κάρτα έχει λήξει.",
)

_EDGE = (
    "",
    " ",
    "\n\t ",
    "a",
    "I",
    "?",
    "...",
    "!!!???",
    "🙂",
    "🙂🙂🙂 🚀",
    "42",
    "3.14159",
    "x" * 300,
    "the " * 400,
    "ok",
    "no",
    "yes please",
    "hello",
    "HELLO WORLD",
    "aaaaaaaaaaaaaaaa",
    "-- -- -- --",
    "#!/bin/sh",
    "{}",
    "[]",
    "null",
    "N/A",
    "https://example.com/a/b?c=d#e",
    "user@example.com",
    "C:\\Program Files\\App\\app.exe",
    '<div class="x"><p>Hi</p></div>',
    "$ pip install -U package",
    "SELECT 1;",
    "TODO",
    "WIP: do not merge",
)

_LISTS = (
    "- apples\n- oranges\n- pears\n- grapes",
    "1. Clone the repository\n2. Install the dependencies\n3. Run the migrations\n4. Start the server",
    "* fast\n* cheap\n* reliable\n(pick two)",
    "Pros:\n- simple API\n- no dependencies\nCons:\n- slow on large inputs\n- no streaming",
    "| name | type | default |\n|---|---|---|\n| timeout | int | 30 |\n| retries | int | 3 |",
    "TODO:\n[ ] write tests\n[x] fix the parser\n[ ] update docs",
    "Shopping list: milk, eggs, bread, butter, cheese, coffee, sugar, flour, salt, pepper",
    "Monday: standup\nTuesday: planning\nWednesday: reviews\nThursday: demos\nFriday: retro",
)


@lru_cache(maxsize=1)
def varied_texts() -> tuple[str, ...]:
    """The int8 accuracy set: about 300 texts, 2 to 256+ tokens (see the module docstring)."""
    chunks = doc_chunks(600, seed=99)
    long_texts = tuple(" ".join(chunks[i : i + 4]) for i in range(300, 340, 4))  # 10 texts over 256 tokens
    return (
        _EDGE
        + _NON_ENGLISH
        + _LISTS
        + code_snippets(40)
        + sentences(1100, seed=99)[1000:1100]
        + chunks[:80]
        + long_texts
    )

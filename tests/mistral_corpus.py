# ruff: noqa: RUF001 - the Chinese and Japanese text uses its own punctuation
"""A multilingual corpus of chat calls, written for these tests, to count with Mistral's tokenizer.

Eight kinds of text (``SEGMENTS``): English prose, code, JSON, tool calls, French, German, Chinese,
Japanese. ``calls(n, seed, weights)`` draws seeded chat requests of one kind each (system prompt,
a few turns, sometimes tools and tool results) with the completion the model answered, in the
OpenAI shape the gateway records; ``weights`` sets the traffic mix.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.core.result import Choice, ToolCall

PROSE = [
    "The quarterly report shows that revenue grew faster than expenses for the third time in a row.",
    "Our support team answered most tickets within four hours, although weekends remain slower.",
    "When the migration finished, every account kept its balance and no invoice was sent twice.",
    "She asked whether the warehouse could ship the order before the holiday, and it could.",
    "Please summarise the meeting notes and list the decisions that still need an owner.",
    "The bridge was closed for repairs, so the bus took a long detour through the old town.",
    "A good estimate is cheap to compute, honest about its error, and easy to explain to a customer.",
    "Rain is expected in the afternoon; bring a coat if you plan to walk to the station.",
    "He rewrote the onboarding guide so that a new engineer can deploy on their first day.",
    "The committee postponed its vote until the auditors publish their findings next month.",
]
FRENCH = [
    "La réunion de lundi a été reportée à mercredi, car plusieurs collègues sont en déplacement.",
    "Pouvez-vous vérifier que la facture du mois d'octobre a bien été envoyée au client ?",
    "Le train pour Lyon part à 8 h 15 ; n'oubliez pas de composter votre billet.",
    "Nous avons amélioré la qualité du service grâce aux retours des utilisateurs.",
    "Il faut prévoir un budget supplémentaire pour la maintenance des serveurs l'année prochaine.",
    "Les enfants ont préparé une pièce de théâtre pour la fête de fin d'année.",
    "Après une longue journée, elle s'est assise au café et a commandé un chocolat chaud.",
    "Le rapport détaille les coûts, les délais et les risques liés au nouveau projet.",
]
GERMAN = [
    "Die Besprechung wurde auf Donnerstag verschoben, weil der Projektleiter krank ist.",
    "Bitte überprüfen Sie, ob die Rechnung für Oktober schon an den Kunden geschickt wurde.",
    "Der Zug nach München hat heute leider zwanzig Minuten Verspätung.",
    "Wir müssen die Datenschutzerklärung aktualisieren, bevor die neue Funktion veröffentlicht wird.",
    "Im Frühling blühen die Obstbäume im Garten meiner Großmutter besonders schön.",
    "Die Geschäftsführung hat beschlossen, die Arbeitszeiten flexibler zu gestalten.",
    "Können Sie mir erklären, wie die monatliche Abrechnung berechnet wird?",
    "Nach dem Umzug dauerte es drei Wochen, bis das Internet endlich funktionierte.",
]
CHINESE = [
    "会议改到星期三下午三点，请大家提前准备好季度报告。",
    "请帮我检查一下十月份的发票是否已经发给客户了。",
    "这座城市的地铁系统非常方便，几乎每个区都有车站。",
    "我们根据用户的反馈改进了产品的搜索功能。",
    "明天可能会下雨，出门的时候记得带伞。",
    "他花了整整一个周末整理书房，终于找到了那本旧相册。",
    "公司决定明年增加研发预算，以加快新产品的上市速度。",
    "请用简单的语言解释一下什么是机器学习。",
]
JAPANESE = [
    "会議は水曜日の午後三時に変更になりましたので、資料の準備をお願いします。",
    "十月分の請求書がお客様に送付されたかどうか確認していただけますか。",
    "駅までは歩いて十分ほどですが、雨の日はバスを使うと便利です。",
    "ユーザーの皆様からのご意見をもとに、検索機能を改善しました。",
    "週末は家族と一緒に京都へ行き、古いお寺をいくつか訪ねました。",
    "新しいプロジェクトの予算とスケジュールについて説明してください。",
    "この料理は簡単に作れるので、忙しい平日の夜にぴったりです。",
    "サーバーのメンテナンスは来週の火曜日の深夜に行われる予定です。",
]
CODE = [
    "def total(items: list[int]) -> int:\n    result = 0\n    for item in items:\n        result += item\n    return result\n",
    "for (let i = 0; i < rows.length; i++) {\n  if (rows[i].status === 'open') {\n    count += 1;\n  }\n}\n",
    "SELECT account_id, SUM(amount_micros) AS spent\nFROM charges\nWHERE created_at >= NOW() - INTERVAL '30 days'\nGROUP BY account_id;\n",
    "fn parse(line: &str) -> Option<(String, u64)> {\n    let (name, value) = line.split_once('=')?;\n    Some((name.trim().to_string(), value.trim().parse().ok()?))\n}\n",
    "class Cache:\n    def __init__(self, size=128):\n        self._items = {}\n        self._size = size\n\n    def get(self, key):\n        return self._items.get(key)\n",
    '#!/bin/sh\nset -eu\nfor file in logs/*.gz; do\n  zcat "$file" | grep -c ERROR\ndone\n',
]
CODE_ASKS = [
    "Why does this function return the wrong total?",
    "Can you add type hints and a docstring to this?",
    "Rewrite this to be faster, please.",
    "Explain what this snippet does, line by line.",
]
NAMES = ["Alice Martin", "Bruno Keller", "Chen Wei", "Daisuke Mori", "Élodie Durand", "Farah Khan"]
CITIES = ["Paris", "Berlin", "Shanghai", "Tokyo", "Montréal", "Zürich", "São Paulo"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_invoices",
            "description": "Find invoices of a customer between two dates.",
            "parameters": {
                "type": "object",
                "properties": {
                    "customer": {"type": "string"},
                    "since": {"type": "string", "format": "date"},
                    "until": {"type": "string", "format": "date"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                },
                "required": ["customer"],
            },
        },
    },
]

SEGMENTS = ("prose", "code", "json", "tools", "french", "german", "chinese", "japanese")
STEADY = {
    "prose": 30,
    "code": 15,
    "json": 10,
    "tools": 10,
    "french": 10,
    "german": 10,
    "chinese": 8,
    "japanese": 7,
}
SHIFTED = {
    "prose": 10,
    "code": 5,
    "json": 10,
    "tools": 10,
    "french": 5,
    "german": 5,
    "chinese": 45,
    "japanese": 10,
}


@dataclass
class Call:
    kind: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)


def _sentences(rng: random.Random, pool: list[str], low: int, high: int, joiner: str = " ") -> str:
    return joiner.join(rng.choice(pool) for _ in range(rng.randint(low, high)))


def _record(rng: random.Random) -> dict[str, Any]:
    return {
        "id": rng.randint(1, 10**6),
        "name": rng.choice(NAMES),
        "city": rng.choice(CITIES),
        "active": rng.random() < 0.5,
        "balance": round(rng.uniform(-100, 10_000), 2),
        "tags": rng.sample(
            ["vip", "trial", "eu", "apac", "overdue", "annual"], k=rng.randint(0, 3)
        ),
    }


def _json_text(rng: random.Random) -> str:
    records = [_record(rng) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.5:
        return json.dumps(records, ensure_ascii=False, indent=2)
    return json.dumps({"items": records, "count": len(records)}, ensure_ascii=False)


LANGUAGES: Mapping[str, tuple[list[str], str, str]] = {
    "prose": (PROSE, " ", "You are a concise assistant."),
    "french": (FRENCH, " ", "Tu es un assistant précis qui répond en français."),
    "german": (GERMAN, " ", "Du bist ein hilfreicher Assistent und antwortest auf Deutsch."),
    "chinese": (CHINESE, "", "你是一个乐于助人的助手，请用中文回答。"),
    "japanese": (JAPANESE, "", "あなたは丁寧なアシスタントです。日本語で答えてください。"),
}


def _call(rng: random.Random, kind: str, number: int) -> Call:
    if kind in LANGUAGES:
        pool, joiner, system = LANGUAGES[kind]
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for _ in range(rng.randint(0, 2)):
            messages.append({"role": "user", "content": _sentences(rng, pool, 1, 3, joiner)})
            messages.append({"role": "assistant", "content": _sentences(rng, pool, 1, 4, joiner)})
        messages.append({"role": "user", "content": _sentences(rng, pool, 1, 6, joiner)})
        answer = _sentences(rng, pool, 2, 12, joiner)
        return Call(kind, messages, choices=[Choice(0, "assistant", answer, finish_reason="stop")])
    if kind == "code":
        snippet = rng.choice(CODE)
        messages = [
            {"role": "system", "content": "You are a senior engineer. Answer with code."},
            {"role": "user", "content": f"{rng.choice(CODE_ASKS)}\n\n```\n{snippet}```"},
        ]
        answer = f"Here is a version:\n\n```\n{rng.choice(CODE)}```\n{rng.choice(PROSE)}"
        return Call(kind, messages, choices=[Choice(0, "assistant", answer, finish_reason="stop")])
    if kind == "json":
        messages = [
            {"role": "system", "content": "Reply with JSON only."},
            {"role": "user", "content": "Normalise these records:\n" + _json_text(rng)},
        ]
        return Call(
            kind, messages, choices=[Choice(0, "assistant", _json_text(rng), finish_reason="stop")]
        )
    # tool calls: a request with tools, sometimes a finished round of calls and results before
    city, customer = rng.choice(CITIES), rng.choice(NAMES)
    messages = [
        {"role": "system", "content": "Use the tools when they help."},
        {
            "role": "user",
            "content": f"What is the weather in {city}, and what does {customer} owe?",
        },
    ]
    if rng.random() < 0.5:
        call_id = f"c{number:08d}"[-9:]
        arguments = json.dumps({"city": city, "unit": rng.choice(["celsius", "fahrenheit"])})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": arguments},
                    }
                ],
            }
        )
        result = json.dumps({"temperature": rng.randint(-10, 35), "sky": "cloudy"})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        messages.append({"role": "user", "content": "And the invoices since January?"})
    arguments = json.dumps(
        {"customer": customer, "since": "2026-01-01", "limit": rng.randint(1, 50)},
        ensure_ascii=False,
    )
    call = ToolCall(0, f"t{number:08d}"[-9:], "function", "search_invoices", arguments)
    return Call(
        kind,
        messages,
        list(TOOLS),
        [Choice(0, "assistant", tool_calls=[call], finish_reason="tool_calls")],
    )


def calls(n: int, seed: int, weights: Mapping[str, int] = STEADY) -> list[Call]:
    """``n`` calls drawn with the mix ``weights`` (kind → weight), reproducibly from ``seed``."""
    rng = random.Random(seed)
    kinds = list(weights)
    return [
        _call(rng, rng.choices(kinds, [weights[k] for k in kinds])[0], seed * 100_000 + i)
        for i in range(n)
    ]

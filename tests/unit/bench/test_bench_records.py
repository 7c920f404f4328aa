"""Rows (bench/records.py): chat_row names every RequestRecord field in its order, so the sender
builds rows by field name and the spool's positional rows stay right."""

from __future__ import annotations

import inspect

from bench.records import CHAT_FIELDS, RequestRecord, chat_row, from_row, pack_events, to_row


def test_chat_row_takes_every_field_in_the_records_order() -> None:
    params = list(inspect.signature(chat_row).parameters)
    assert ["kind", *params] == list(CHAT_FIELDS)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in inspect.signature(chat_row).parameters.values())


def test_a_row_built_by_name_reads_back_as_the_record() -> None:
    rec = RequestRecord(request_id="p1-7", phase="measure", process=1, intended_ns=10, sent_ns=12, wall_sent_s=1.5,
                        headers_ns=20, event_ns=[30, 40, 55], event_tokens=[1, 2, 1], event_content=[False, True, True],
                        end_ns=60, status=200, prompt_tokens=9, server_prompt_tokens=9, output_tokens=4,
                        output_tokens_source="usage", max_tokens=8, output_text="hi", finish_reason="stop",
                        response_id="chatcmpl-1")
    values = {k: v for k, v in rec.__dict__.items() if k != "kind"}
    values["event_ns"], values["event_tokens"], values["event_content"] = pack_events(
        rec.event_ns, rec.event_tokens, rec.event_content)
    row = chat_row(**values)
    assert type(row) is tuple  # the engine spools exact tuples (marshal)
    assert row == to_row(rec)
    assert from_row(row) == rec


def test_an_error_row_leaves_the_rest_unset() -> None:
    row = chat_row(request_id="p0-1", phase="warmup", process=0, intended_ns=1, sent_ns=2, wall_sent_s=3.0,
                   headers_ns=None, event_ns=[], event_tokens=None, event_content=None, end_ns=9,
                   error="connect_error", error_detail="refused", prompt_tokens=5, max_tokens=6)
    rec = from_row(row)
    assert isinstance(rec, RequestRecord)
    assert (rec.error, rec.status, rec.output_tokens, rec.event_tokens, rec.max_tokens) == ("connect_error", None,
                                                                                           None, [], 6)

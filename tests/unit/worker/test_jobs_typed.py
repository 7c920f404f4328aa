"""`splitstack jobs --output json` prints numbers as numbers (Redis stores every value as text)."""

from __future__ import annotations

from worker.jobs_view import typed


def test_counts_and_times_are_numbers_and_text_stays_text():
    row = {"job_id": "0123", "state": "done", "pages": "3", "deliveries": "1", "submitted_at": "1764230400.25",
           "processing_s": "12.5", "source": "/data/42.pdf", "parts_done": "not-a-number"}
    assert typed(row) == {"job_id": "0123", "state": "done", "pages": 3, "deliveries": 1,
                          "submitted_at": 1764230400.25, "processing_s": 12.5, "source": "/data/42.pdf",
                          "parts_done": "not-a-number"}

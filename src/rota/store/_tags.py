"""The stores' index of tags (``tags = [...]``, ``ensure(tags=)``): tag -> task, kept
with the rows (:func:`~rota.store._base.write_row`), so that a bulk action (``rota
pause --tag etl``) finds its jobs with one indexed read instead of reading every
task's spec. The same SQL in every database
store; :class:`~rota.store.MemoryStore` reads its rows."""

from __future__ import annotations

from ._base import FINISHED_SQL

TAGS_FROM_SPECS = {
    "sqlite": (
        "INSERT OR IGNORE INTO {p}tags (tag, task_id) SELECT j.value, t.task_id FROM "
        "{p}tasks t, json_each(t.spec, '$.tags') j WHERE json_valid(t.spec) "
        "AND json_type(t.spec, '$.tags') = 'array' AND j.type = 'text'"
    ),
    "postgres": (
        "INSERT INTO {p}tags (tag, task_id) SELECT DISTINCT jsonb_array_elements_text("
        "spec::jsonb -> 'tags'), task_id FROM {p}tasks WHERE spec LIKE '%%\"tags\": [%%' "
        "ON CONFLICT DO NOTHING"
    ),
}
"""The tags of the rows written before the index (schema 7), per dialect: JSON is
read differently by each. (PostgreSQL reads only specs naming tags, which rota
wrote as JSON.)"""


def tag_steps(p: str, dialect: str) -> list[str]:
    """Schema step 8's part: the index of tags, filled from the rows' specs."""
    return [
        f"CREATE TABLE IF NOT EXISTS {p}tags (tag TEXT NOT NULL, task_id TEXT NOT NULL, "
        "PRIMARY KEY (tag, task_id))",
        f"CREATE INDEX IF NOT EXISTS {p}tags_task ON {p}tags (task_id)",
        TAGS_FROM_SPECS[dialect].format(p=p),
    ]


def tagged_sql(p: str, mark: str) -> str:
    """The ids of the unfinished tasks with a tag, by id: one range of the index."""
    return (
        f"SELECT g.task_id FROM {p}tags g JOIN {p}tasks t ON t.task_id = g.task_id "
        f"WHERE g.tag = {mark} AND t.status NOT IN {FINISHED_SQL} ORDER BY g.task_id"
    )

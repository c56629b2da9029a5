"""The pipeline's core result without Spark, as a reference for make bench:
DuckDB over the same landing gives the distinct readings per device (valid
payloads, (device, boot, seq) de-duplicated), which must equal Spark's.

    PYTHONPATH=tools python -m pipeline.duckdb_ref LANDING_DIR
"""
import sys
import time

VALID = """
json_valid(payload) AND json_type(payload) = 'OBJECT'
AND json_type(payload, '$.d') = 'VARCHAR' AND json_extract_string(payload, '$.d') <> ''
AND json_type(payload, '$.b') IN ('UBIGINT', 'BIGINT') AND CAST(payload->>'$.b' AS BIGINT) >= 0
AND json_type(payload, '$.s') IN ('UBIGINT', 'BIGINT') AND CAST(payload->>'$.s' AS BIGINT) >= 0
AND json_type(payload, '$.q') IN ('UBIGINT', 'BIGINT') AND CAST(payload->>'$.q' AS BIGINT) IN (0, 1, 2)
AND rx_ms IS NOT NULL
"""


def readings_per_device(landing, threads=None):
    """{device: distinct readings}, and the seconds it took."""
    import duckdb
    t = time.monotonic()
    con = duckdb.connect()
    if threads:
        con.execute("SET threads = %d" % int(threads))
    rows = con.execute("""
        WITH l AS (
          SELECT payload, rx_ms FROM read_json(?, format = 'newline_delimited',
            columns = {topic: 'VARCHAR', qos: 'INTEGER', retain: 'BOOLEAN', dup: 'BOOLEAN',
                       rx_ms: 'BIGINT', payload: 'VARCHAR'},
            ignore_errors = true, hive_partitioning = false))
        SELECT payload->>'$.d' AS device,
               count(DISTINCT (CAST(payload->>'$.b' AS BIGINT), CAST(payload->>'$.s' AS BIGINT)))
        FROM l WHERE %s GROUP BY 1""" % VALID,
                       [landing.rstrip("/") + "/date=*/hour=*/*.jsonl"]).fetchall()
    con.close()
    return dict(rows), time.monotonic() - t


if __name__ == "__main__":
    counts, secs = readings_per_device(sys.argv[1])
    for d in sorted(counts):
        print(d, counts[d])
    print("%d devices, %d readings in %.2f s" % (len(counts), sum(counts.values()), secs))

"""The contract at the door (tools/pipeline/contract.py), case by case: each
payload on its topic and the reasons both the collector and the pipeline
must give ([]: a reading). test_collector.py checks them on the collector's
side, test_pipeline.py on Spark's; the hostile corpus sends them through a
real broker and collector into the pipeline."""

from pipeline import contract as C

T = "holdfast/dev-a/telemetry"
GOOD = '{"d":"dev-a","b":1,"s":2,"q":1,"t":21.5,"u":3}'
FLAT = C.R_NOT_FLAT
DEV = C.r_bad("d", C.FIELDS[0][3])


def bad(key):
    return C.r_bad(key, [f for f in C.FIELDS if f[0] == key][0][3])


CASES = [
    # good readings, in the board's compact form and not
    (GOOD, T, []),
    ('{"d":"dev-a","b":0,"s":0,"q":0}', T, []),
    (' { "q" : 2 , "s" : 9999999999999999 , "b" : 999999999 , "d" : "dev-a" , '
     '"t" : -1.5e-3 , "u" : null , "w" : 1767225600000 , "x" : true } ', T, []),
    ('{"x":",","d":"dev-a","b":0,"s":0,"q":0,"t":null,"note":"a {b} c"}', T, []),
    ('{"d":"esp32-a1b2c3","b":7,"s":1234,"q":1,"t":21.5,"u":812345}',
     "fleet/site-1/esp32-a1b2c3/telemetry", []),
    # 1. nesting, bounded before any parse
    ("[" * 2000, T, [C.R_TOO_LONG]),
    ("[" * 1000, T, [FLAT]),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"x":{"y":[1,2]}}', T, [FLAT]),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"pad":"%s"}' % ("x" * 1100), T, [C.R_TOO_LONG]),
    # 2. device ids a partition cannot hold
    ('{"d":"%s","b":1,"s":2,"q":1}' % ("x" * 300), "holdfast/%s/telemetry" % ("x" * 300), [DEV]),
    ('{"d":"%s","b":1,"s":2,"q":1}' % ("x" * 64), "holdfast/%s/telemetry" % ("x" * 64), []),
    ('{"d":"__HIVE_DEFAULT_PARTITION__","b":1,"s":2,"q":1}',
     "holdfast/__HIVE_DEFAULT_PARTITION__/telemetry", [DEV]),
    ('{"d":"a/b","b":1,"s":2,"q":1}', T, [DEV]),
    ('{"d":"dev a","b":1,"s":2,"q":1}', T, [DEV]),
    ('{"d":"","b":1,"s":2,"q":1}', T, [DEV]),
    ('{"d":"..","b":1,"s":2,"q":1}', T, [DEV]),
    # 3. numbers the tables cannot hold, and negative ones
    ('{"d":"dev-a","b":1,"s":9223372036854775807,"q":1}', T, [bad("s")]),
    ('{"d":"dev-a","b":1,"s":18446744073709551616,"q":1}', T, [bad("s")]),
    ('{"d":"dev-a","b":1000000000,"s":2,"q":1}', T, [bad("b")]),
    ('{"d":"dev-a","b":-1,"s":-2,"q":-1}', T, [bad("b"), bad("s"), bad("q")]),
    ('{"d":"dev-a","b":1.0,"s":2e0,"q":1}', T, [bad("b"), bad("s")]),
    ('{"d":"dev-a","b":true,"s":"7","q":1}', T, [bad("b"), bad("s")]),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"t":1e999}', T, [bad("t")]),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"t":1234567890}', T, [bad("t")]),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"t":NaN}', T, [FLAT]),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"u":-5,"w":99999999999999999}', T, [bad("u"), bad("w")]),
    # 4. what the two JSON parsers read differently
    ('{"\\u0064":"dev-a","b":1,"s":2,"q":1}', T, [FLAT]),
    ('{"d":"dev-a","d":"dev-b","b":1,"s":2,"q":1}', T, [C.r_twice("d")]),
    ('{"d":"dev-a","b":1,"s":2,"q":1} trailing', T, [FLAT]),
    ('{"d":"dev-a","b":1,"s":2,"q":1}{}', T, [FLAT]),
    ('{"d":42,"b":1,"s":2,"q":1}', T, [DEV]),
    ("not json", T, [FLAT]),
    ("", T, [FLAT]),
    ("[1,2]", T, [FLAT]),
    ('{"b":1,"s":2,"q":1}', T, [C.r_missing("d")]),
    ('{"d":"dev-a","b":1,"q":1}', T, [C.r_missing("s")]),
    ('{"d":"dev-a","b":1,"s":2}', T, [C.r_missing("q")]),
    ('{"d":"dev-a","b":1,"s":2,"q":3}', T, [bad("q")]),
    ('{"d":"dev-a","b":1,"s":2,"q":1}\u2028', T, [FLAT]),
    ('{"d":"dev-a","b":1,"s":2,"q":1}\n', T, []),
    # 5. not valid Unicode, or not ASCII where an id must be
    ('{"d":"dev-\\ud800","b":1,"s":2,"q":1}', T, [FLAT]),
    ('{"d":"dev-\u00e9","b":1,"s":2,"q":1}', "holdfast/dev-\u00e9/telemetry", [DEV]),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"note":"\u00e9\U0001F600"}', T, []),
    # 6. clocks far off are readings (the plots bound themselves)
    ('{"d":"dev-a","b":1,"s":2,"q":1,"w":0}', T, []),
    ('{"d":"dev-a","b":1,"s":2,"q":1,"w":9999999999999999}', T, []),
    # 7. the topic names the device
    (GOOD, "holdfast/attacker/telemetry", [C.R_SPOOFED]),
    (GOOD, "holdfast/dev-ab/telemetry", [C.R_SPOOFED]),
    (GOOD, "holdfast/xdev-a/telemetry", [C.R_SPOOFED]),
    (GOOD, "", [C.R_SPOOFED]),
]

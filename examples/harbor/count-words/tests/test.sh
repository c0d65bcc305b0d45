#!/bin/bash
# The expected count lives with the tests, which the agent never sees.
expected=$(cat /tests/expected.txt)
if [ "$(tr -d ' \n' < /app/count.txt 2>/dev/null)" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi

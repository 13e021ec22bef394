"""Multi-step tasks over the recorded catalog, written for contextsieve by hand (not from any data set).

Each entry is ``(user message, tools of the first step, (next step's text, its tools), ...)``
(:mod:`benchmarks.data.loop_steps.steps`): the first step is the user's message; each later step is
what the host sends the selector next, in three kinds on purpose: the model's next intent in its own
words ("Show me the diff."), a short follow-up that names only the task's object or nothing at all
("Now commit it.", "Approve it."), and the previous tool's result summarised ("Build #512 failed: 1
test failed, test_timeout_retry."), which names things, not the action. A tool is ``server/tool``; a
tuple is a group of alternatives (any one would do); ``[]`` is a step that needs no tool.
"""

from __future__ import annotations

EDIT = ("filesystem/edit_file", "filesystem/write_file")
READ = ("filesystem/read_text_file", "filesystem/read_file")
PODS = ("kubernetes/pods_list_in_namespace", "kubernetes/pods_list")

TASKS: list[tuple] = [
    # -- git, the local files ------------------------------------------------------------------
    (
        "What's uncommitted in my working tree? Commit the config fix with a clear message.",
        ["git/git_status"],
        (
            "config/settings.py and tests/test_settings.py are modified. Show me the diff.",
            [("git/git_diff_unstaged", "git/git_diff")],
        ),
        ("Looks right. Stage both files.", ["git/git_add"]),
        ("Now commit it.", ["git/git_commit"]),
    ),
    (
        "Create a branch fix/retry-timeout from main and switch to it.",
        ["git/git_create_branch"],
        ("Branch created.", ["git/git_checkout"]),
    ),
    (
        "Who changed the retry logic last week? Show me that commit.",
        ["git/git_log"],
        ("Commit 4f2a9c by Sam on Tuesday: 'retry: cap backoff at 30 s'.", ["git/git_show"]),
    ),
    (
        "I staged the wrong file: unstage vendor/lib.js and show me what is still staged.",
        ["git/git_reset"],
        ("Unstaged. What's left?", ["git/git_diff_staged"]),
    ),
    (
        "Show me what the last commit changed in README.md and put the old intro paragraph back.",
        [("git/git_show", "git/git_log")],
        ("Commit a1b2c3 rewrote the intro. Restore the previous paragraph in README.md.", [EDIT]),
        ("Commit that.", ["git/git_add", "git/git_commit"]),
    ),
    (
        "Find every Python test file under services/ and tell me which ones touch the payment client.",
        ["filesystem/search_files"],
        ("31 test files found. Read the ones in services/payments.", [("filesystem/read_multiple_files", *READ)]),
        ("test_refunds.py and test_charge.py import PaymentClient. Summarise how they use it.", []),
    ),
    (
        "Rename the logs folder to logs-old and create a fresh empty logs folder.",
        ["filesystem/move_file"],
        ("Done. Now the new one.", ["filesystem/create_directory"]),
    ),
    (
        "How big is the data directory, and which files in it are over 100 MB?",
        [("filesystem/list_directory_with_sizes", "filesystem/directory_tree")],
        ("Check the size and date of data/events-2025.parquet.", ["filesystem/get_file_info"]),
    ),
    (
        "Fetch the OpenAPI spec from https://api.example.com/openapi.json and write it to docs/openapi.json, then commit it.",
        ["fetch/fetch"],
        ("Got 180 KB of JSON.", ["filesystem/write_file"]),
        ("Commit it.", ["git/git_add", "git/git_commit"]),
    ),
    (
        "Run the test suite with pytest and write the failures to failures.txt.",
        ["shell/shell_execute"],
        ("3 failed: test_retry, test_timeout, test_parse.", ["filesystem/write_file"]),
    ),
    (
        "Convert docs/spec.pdf to Markdown and save it next to it as spec.md.",
        ["markitdown/convert_to_markdown"],
        ("Converted: 14 pages.", ["filesystem/write_file"]),
    ),
    # -- fetch, time, memory -------------------------------------------------------------------
    (
        "Read the release notes at https://example.com/releases/4.2 and remember the breaking changes.",
        ["fetch/fetch"],
        (
            "Two breaking changes: the config key 'timeout' became 'timeout_s', and Python 3.9 support was dropped. "
            "Store them.",
            [("memory/create_entities", "memory/add_observations")],
        ),
    ),
    (
        "What time is it in Singapore, and what is 4pm Singapore time in Berlin?",
        ["time/get_current_time"],
        ("21:40 in Singapore now. Now the conversion.", ["time/convert_time"]),
    ),
    (
        "Remember that Priya owns the billing service and prefers async code reviews.",
        [("memory/search_nodes", "memory/open_nodes")],
        ("No node for Priya yet.", ["memory/create_entities"]),
        ("Link her to billing-service.", ["memory/create_relations"]),
    ),
    (
        "What do you remember about the billing service? Add that it moved to Postgres 16 last week.",
        [("memory/search_nodes", "memory/open_nodes", "memory/read_graph")],
        ("billing-service: owned by Priya, Go 1.22, deploys on Thursdays.", ["memory/add_observations"]),
    ),
    (
        "Forget everything about the old staging cluster.",
        [("memory/search_nodes", "memory/open_nodes")],
        ("Found entity 'staging-eu-1' with 6 observations and 2 relations. Delete it.", ["memory/delete_entities"]),
    ),
    (
        "The release freeze starts at 18:00 Berlin time today; note it in memory with the New York time too.",
        ["time/convert_time"],
        ("12:00 in New York.", [("memory/create_entities", "memory/add_observations")]),
    ),
    # -- Jira and Confluence -------------------------------------------------------------------
    (
        "Create a Jira bug in PAY for the checkout crash on Safari and assign it to Dana.",
        ["atlassian/jira_create_issue"],
        ("Created PAY-812.", [("atlassian/jira_assign_issue", "atlassian/jira_update_issue")]),
    ),
    (
        "Move PAY-640 to Done and log 3 hours of work on it.",
        [("atlassian/jira_get_transitions", "atlassian/jira_transition_issue")],
        ("Transitions: To Do, In Progress, In Review, Done (id 31).", ["atlassian/jira_transition_issue"]),
        ("Now the 3 hours.", ["atlassian/jira_add_worklog"]),
    ),
    (
        "What's in the current sprint of the PAY board, and which tickets are still unassigned?",
        [("atlassian/jira_get_agile_boards", "atlassian/jira_get_sprints_from_board")],
        ("Board 14 'PAY Scrum', active sprint 'PAY 42' (id 388).", ["atlassian/jira_get_sprint_issues"]),
        ("PAY-797 and PAY-801 have no assignee.", []),
    ),
    (
        "Write a Confluence page in the ENG space with the notes of today's incident review, then link it from OPS-221.",
        ["atlassian/confluence_create_page"],
        (
            "Page 'Incident review 2026-11-26' created (id 99812).",
            [("atlassian/jira_create_remote_issue_link", "atlassian/jira_add_comment")],
        ),
    ),
    (
        "Find the Confluence page about our on-call rotation and add that Omar joins in December.",
        ["atlassian/confluence_search"],
        ("Found 'On-call rotation 2026' (id 4410) in OPS.", ["atlassian/confluence_get_page"]),
        (
            "Add Omar in the December section.",
            [("atlassian/confluence_update_page_section", "atlassian/confluence_update_page")],
        ),
    ),
    (
        "Which Jira tickets mention the payment gateway timeout? Add a comment on the newest one that we have a fix.",
        ["atlassian/jira_search"],
        ("PAY-790 (newest, open), PAY-701, OPS-88.", ["atlassian/jira_add_comment"]),
    ),
    (
        "Who has viewed the API migration guide on Confluence, and what changed in its last edit?",
        ["atlassian/confluence_search"],
        ("Found 'API v3 migration guide' (id 5521).", ["atlassian/confluence_get_page_views"]),
        ("Now the last edit.", [("atlassian/confluence_get_page_diff", "atlassian/confluence_get_page_history")]),
    ),
    (
        "Create the version 2.4.0 in the PAY project and put PAY-801 and PAY-802 into it.",
        ["atlassian/jira_create_version"],
        ("Version 2.4.0 created.", ["atlassian/jira_update_issue"]),
    ),
    (
        "Link PAY-805 to the epic PAY-700 and mark it as blocked by OPS-91.",
        ["atlassian/jira_link_to_epic"],
        ("Linked to the epic.", ["atlassian/jira_create_issue_link"]),
    ),
    (
        "Start a new sprint 'PAY 43' for the next two weeks and move the unfinished tickets of PAY 42 into it.",
        ["atlassian/jira_create_sprint"],
        (
            "Sprint 'PAY 43' (id 391) created. Which tickets of PAY 42 are not done?",
            ["atlassian/jira_get_sprint_issues"],
        ),
        ("PAY-790, PAY-797 and PAY-801.", ["atlassian/jira_add_issues_to_sprint"]),
    ),
    (
        "Attach the screenshot error.png to the Confluence troubleshooting page.",
        ["atlassian/confluence_search"],
        (
            "Page 'Troubleshooting checkout' (id 7781).",
            [("atlassian/confluence_upload_attachment", "atlassian/confluence_upload_attachments")],
        ),
    ),
    (
        "Read the stack trace in logs/app.log, find the Jira ticket for it, and file one if there is none.",
        [READ],
        ("Last trace: 'KeyError: currency' in pricing/convert.py line 88.", ["atlassian/jira_search"]),
        ("No ticket matches.", ["atlassian/jira_create_issue"]),
    ),
    (
        "Summarise today's commits in a Confluence page under the ENG space.",
        ["git/git_log"],
        ("9 commits today: retry cap, CSV fix, dependency bumps.", []),
        ("Now the page.", ["atlassian/confluence_create_page"]),
    ),
    # -- Linear, GitLab, Bitbucket ---------------------------------------------------------------
    (
        "Open a Linear issue for the flaky login test and comment with the CI link.",
        ["linear/linear_create_issue"],
        ("Created ENG-431.", ["linear/linear_add_comment"]),
    ),
    (
        "What Linear issues are assigned to me? Set the one about rate limits to In Progress.",
        ["linear/linear_get_user_issues"],
        ("7 issues; ENG-402 'Rate limits on public API' is Todo.", ["linear/linear_update_issue"]),
    ),
    (
        "Search Linear for the CSV export bug and, if it exists, add that it also happens with semicolons.",
        ["linear/linear_search_issues"],
        ("ENG-388 'CSV export breaks on commas', open.", ["linear/linear_add_comment"]),
    ),
    (
        "Take the Jira ticket PAY-790 and create a Linear issue mirroring it for the platform team.",
        ["atlassian/jira_get_issue"],
        ("PAY-790: 'Gateway timeout on refunds', priority High.", ["linear/linear_create_issue"]),
    ),
    (
        "Fork the upstream parser project on GitLab, create a branch fix-unicode and open a merge request.",
        ["gitlab/search_repositories"],
        ("Found group/parser (id 311).", ["gitlab/fork_repository"]),
        ("Forked to me/parser.", ["gitlab/create_branch"]),
        (
            "Branch fix-unicode exists. Commit the fix and open the MR.",
            [("gitlab/push_files", "gitlab/create_or_update_file"), "gitlab/create_merge_request"],
        ),
    ),
    (
        "Update the CI config in our GitLab repo to use Python 3.13.",
        ["gitlab/get_file_contents"],
        ("The current .gitlab-ci.yml uses image python:3.11.", [("gitlab/create_or_update_file", "gitlab/push_files")]),
    ),
    (
        "Read our local CONTRIBUTING.md and open an issue on GitLab listing what's outdated in it.",
        [READ],
        ("It still mentions Python 3.8 and the old make targets.", ["gitlab/create_issue"]),
    ),
    (
        "List the open pull requests of the payments repo in the acme workspace on Bitbucket and approve PR 17.",
        ["bitbucket/bb_get"],
        ("5 open PRs; #17 'Retry on 502' by Sam, builds green.", ["bitbucket/bb_post"]),
    ),
    (
        "Clone the infra repo from Bitbucket and show me its folder structure.",
        ["bitbucket/bb_clone"],
        ("Cloned into ~/work/infra.", ["filesystem/directory_tree"]),
    ),
    # -- the browser -----------------------------------------------------------------------------
    (
        "Open staging.example.com/login, sign in with the test account and check the dashboard for console errors.",
        ["playwright/playwright_navigate"],
        ("Login page loaded: username and password fields.", ["playwright/playwright_fill"]),
        ("Filled. Submit the form.", ["playwright/playwright_click"]),
        ("Dashboard loaded.", ["playwright/playwright_console_logs"]),
    ),
    (
        "Save the invoice page at billing.example.com/inv/778 as a PDF.",
        ["playwright/playwright_navigate"],
        ("Page is open.", ["playwright/playwright_save_as_pdf"]),
    ),
    (
        "Check that our API's /health endpoint returns 200, then screenshot the public status page.",
        [("playwright/playwright_get", "fetch/fetch")],
        ('200 OK, body {"status": "ok"}.', ["playwright/playwright_navigate"]),
        ("status.example.com loaded.", ["playwright/playwright_screenshot"]),
    ),
    (
        "Record a test of adding an item to the cart on the demo shop.",
        ["playwright/start_codegen_session"],
        ("Session started.", ["playwright/playwright_navigate"]),
        ("Click 'Add to cart' on the first product.", ["playwright/playwright_click"]),
        ("Done, stop recording and write the test.", ["playwright/end_codegen_session"]),
    ),
    (
        "Get the newest entry of the changelog page at app.example.com/changelog and add it to CHANGELOG.md.",
        ["playwright/playwright_navigate"],
        ("Page open.", [("playwright/playwright_get_visible_text", "playwright/playwright_get_visible_html")]),
        ("Newest entry: v3.2 'Dark mode, faster search'. Put it in the file.", [EDIT]),
    ),
    # -- Kubernetes ------------------------------------------------------------------------------
    (
        "Why is the checkout pod crash-looping in the shop namespace?",
        [PODS],
        ("checkout-7d9f-x2 restarted 14 times, status CrashLoopBackOff.", ["kubernetes/pods_log"]),
        ("The log ends with 'missing env STRIPE_KEY'. Show the events too.", ["kubernetes/events_list"]),
    ),
    (
        "Scale the api deployment in prod to 6 replicas and confirm the pods come up.",
        ["kubernetes/resources_scale"],
        ("Scaled to 6.", [PODS]),
    ),
    (
        "Which pods use the most memory in the data namespace? Restart the worst one.",
        ["kubernetes/pods_top"],
        ("etl-worker-5 uses 3.8 GiB of its 4 GiB limit.", ["kubernetes/pods_delete"]),
    ),
    (
        "Run a one-off busybox pod in default and check DNS resolution of the api service from it.",
        ["kubernetes/pods_run"],
        ("Pod dns-check running.", ["kubernetes/pods_exec"]),
        ("Resolved fine. Clean it up.", ["kubernetes/pods_delete"]),
    ),
    (
        "Which cluster am I connected to? List the namespaces there.",
        ["kubernetes/configuration_view"],
        ("Context prod-eu, cluster prod-eu-1.", ["kubernetes/namespaces_list"]),
    ),
    (
        "Check the failing pod's logs and open a Linear issue with the error.",
        [PODS],
        ("payments-6c8-abc is failing.", ["kubernetes/pods_log"]),
        ("Error: 'connection refused to redis:6379'.", ["linear/linear_create_issue"]),
    ),
    # -- Terraform -------------------------------------------------------------------------------
    (
        "Which arguments does aws_s3_bucket take in the AWS provider? Then find a community module for a VPC.",
        [("terraform/resourceArgumentDetails", "terraform/resourceUsage")],
        ("Now the VPC module.", ["terraform/moduleSearch"]),
        ("terraform-aws-modules/vpc/aws is the top hit. Its inputs?", ["terraform/moduleDetails"]),
    ),
    (
        "Find a Sentinel policy that enforces S3 encryption and show me its details.",
        ["terraform/policySearch"],
        ("Found 'aws-s3-encryption-at-rest' in policy set CIS-AWS.", ["terraform/policyDetails"]),
    ),
    (
        "What data sources does the google provider have for storage, and is there a getting-started guide?",
        ["terraform/listDataSources"],
        (
            "google_storage_bucket, google_storage_bucket_object, google_storage_project_service_account.",
            ["terraform/providerGuides"],
        ),
    ),
    # -- Supabase, Cloudflare --------------------------------------------------------------------
    (
        "Add a last_login column to the users table in our Supabase project and regenerate the TypeScript types.",
        [("supabase/list_projects", "supabase/list_tables")],
        ("Project acme-prod (ref abcd). users has id, email, created_at.", ["supabase/apply_migration"]),
        ("Migration applied.", ["supabase/generate_typescript_types"]),
    ),
    (
        "Why are API calls to our Supabase project failing since noon? Check the logs and the advisors.",
        ["supabase/query_logs"],
        ("Many 'permission denied for table orders' since 12:04.", ["supabase/get_advisors"]),
    ),
    (
        "Create a Supabase branch for the schema change, test it, then merge it.",
        ["supabase/create_branch"],
        ("Branch 'schema-v2' created. Run the migration there.", ["supabase/apply_migration"]),
        ("Tests pass. Merge.", ["supabase/merge_branch"]),
    ),
    (
        "Deploy the send-welcome-email edge function from functions/send-welcome-email/index.ts.",
        [READ],
        ("Read 48 lines of TypeScript.", ["supabase/deploy_edge_function"]),
    ),
    (
        "Put the new maintenance flag into the CONFIG KV namespace and check it reads back.",
        ["cloudflare/get_kvs"],
        ("CONFIG namespace id 9a1b.", ["cloudflare/kv_put"]),
        ("Written.", ["cloudflare/kv_get"]),
    ),
    (
        "Upload report.pdf to the R2 bucket 'exports' and list what's in the bucket.",
        ["cloudflare/r2_put_object"],
        ("Uploaded.", ["cloudflare/r2_list_objects"]),
    ),
    (
        "Roll back the edge-router worker to its previous version.",
        ["cloudflare/version_list"],
        ("Versions: v57 (current, deployed 10 min ago), v56.", ["cloudflare/version_rollback"]),
    ),
    (
        "Add a cron trigger to the cleanup worker to run every night at 3, and set its RETENTION_DAYS variable to 30.",
        ["cloudflare/cron_create"],
        ("Cron '0 3 * * *' added.", ["cloudflare/env_var_set"]),
    ),
    (
        "How many requests did the api worker serve yesterday? Also query the D1 database for yesterday's signups.",
        [("cloudflare/workers_analytics_search", "cloudflare/analytics_get")],
        ("1.2 M requests, 0.3% errors.", [("cloudflare/d1_list_databases", "cloudflare/d1_query")]),
        ("Database 'users-db'. Count yesterday's signups.", ["cloudflare/d1_query"]),
    ),
    # -- databases and search --------------------------------------------------------------------
    (
        "How many keys are in the Redis cache, and what's stored under session:8812?",
        ["redis/dbsize"],
        ("41,203 keys. Now that session key.", [("redis/type", "redis/hgetall", "redis/get")]),
        ("A hash with user_id and expires_at. Extend its expiry by an hour.", ["redis/expire"]),
    ),
    (
        "Push a reindex job onto the jobs:reindex queue and tell me how long the queue is.",
        [("redis/lpush", "redis/rpush")],
        ("Pushed.", ["redis/llen"]),
    ),
    (
        "Create a vector index over the doc:* hashes in Redis and search it for 'password reset'.",
        ["redis/create_vector_index_hash"],
        ("Index idx:docs ready.", [("redis/vector_search_hash", "redis/hybrid_search")]),
    ),
    (
        "Which tables do we have in ClickHouse's analytics database? Count yesterday's page views.",
        [("clickhouse/list_tables", "clickhouse/list_databases")],
        ("events, page_views, sessions.", ["clickhouse/run_query"]),
    ),
    (
        "Export the open incidents from the ClickHouse incidents table to incidents.csv.",
        ["clickhouse/run_query"],
        ("37 rows.", ["filesystem/write_file"]),
    ),
    (
        "Is the Elasticsearch cluster healthy? Find the logs index with the most documents and search it for 'OOMKilled'.",
        ["elasticsearch/get_cluster_health"],
        ("Yellow: 3 unassigned replicas.", ["elasticsearch/list_indices"]),
        ("logs-2026.11 has 48 M docs.", ["elasticsearch/search_documents"]),
    ),
    (
        "Create an Elasticsearch index 'products-v2' and point the alias 'products' at it.",
        ["elasticsearch/create_index"],
        ("Created.", ["elasticsearch/put_alias"]),
    ),
    (
        "Load sales.csv into DuckDB and tell me the top 5 products by revenue.",
        ["motherduck/execute_query"],
        ("Table sales created, 12,400 rows. Columns?", ["motherduck/list_columns"]),
        ("product, qty, price, date.", ["motherduck/execute_query"]),
    ),
    (
        "Find the tables that have a customer_id column in our database and show me the ten newest orders.",
        ["dbhub/search_objects"],
        ("orders, invoices and tickets have customer_id.", ["dbhub/execute_sql"]),
    ),
    # -- Jenkins ---------------------------------------------------------------------------------
    (
        "Why did the last nightly build of payments fail? Rerun it if it was a flaky test.",
        [("jenkins/get_build", "jenkins/get_build_test_failures", "jenkins/get_build_console_output")],
        ("Build #512 failed: 1 test failed, test_timeout_retry (known flaky).", ["jenkins/build_item"]),
    ),
    (
        "Download the coverage report artifact of the latest main build and save it to reports/.",
        [("jenkins/get_all_build_artifacts", "jenkins/get_build")],
        ("Build #877 has coverage.xml and junit.xml.", ["jenkins/get_build_artifact"]),
        ("Save coverage.xml to reports/coverage.xml.", ["filesystem/write_file"]),
    ),
    (
        "Which Jenkins plugins have updates, and is anything queued right now?",
        ["jenkins/get_plugins_with_updates"],
        ("12 plugins with updates.", ["jenkins/get_all_queue_items"]),
    ),
    (
        "Approve the pending deploy input on the release pipeline's running build.",
        ["jenkins/get_running_builds"],
        ("release #88 is waiting for input 'Deploy to prod?'.", ["jenkins/get_pending_inputs"]),
        ("Approve it.", ["jenkins/submit_input"]),
    ),
    # -- code analysis, vector search, the test server -------------------------------------------
    (
        "Where is parse_config used in the api project, and how complex is it?",
        ["tree-sitter/register_project_tool"],
        ("Project 'api' registered.", ["tree-sitter/find_usage"]),
        ("Used in 6 places.", ["tree-sitter/analyze_complexity"]),
    ),
    (
        "List the functions and classes in src/retry.py and find code similar to backoff().",
        ["tree-sitter/get_symbols"],
        ("12 functions, 2 classes.", ["tree-sitter/find_similar_code"]),
    ),
    (
        "Create a Pinecone index for our support articles and upsert the three FAQ entries.",
        ["pinecone/create-index-for-model"],
        ("Index support-articles created with llama-text-embed-v2.", ["pinecone/upsert-records"]),
    ),
    (
        "Search the support index for refund questions and rerank the hits.",
        [("pinecone/search-records", "pinecone/cascading-search")],
        ("20 hits.", ["pinecone/rerank-documents"]),
    ),
    (
        "Ping the everything test server with an echo, then ask it for the sum of 17 and 25.",
        ["everything/echo"],
        ("Echo returned 'ping'.", ["everything/get-sum"]),
    ),
]

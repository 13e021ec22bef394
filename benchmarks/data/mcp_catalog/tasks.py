"""Tasks over the real MCP catalog, written for contextsieve (not taken from any data set).

Each task is ``(language, message, needed)``; ``needed`` lists what the task needs, one entry per step:
a ``"server/tool"`` or, where the message does not name a server and several tools do the same job
equally well, a list of them (any one satisfies the step). Steps a model would do itself (reasoning,
writing text) need no tool.
"""

from __future__ import annotations

WEB_SEARCH = [
    "brave-search/brave_web_search",
    "tavily/tavily_search",
    "duckduckgo/search",
    "firecrawl/firecrawl_search",
]
FETCH_PAGE = ["fetch/fetch", "duckduckgo/fetch_content", "firecrawl/firecrawl_scrape", "tavily/tavily_extract"]
WRITE_FILE = ["filesystem/write_file"]
READ_FILE = ["filesystem/read_text_file", "filesystem/read_file"]
NOW = ["time/get_current_time"]
BROWSER_OPEN = ["playwright/browser_navigate", "puppeteer/puppeteer_navigate", "chrome-devtools/navigate_page"]
SCREENSHOT = ["playwright/browser_take_screenshot", "puppeteer/puppeteer_screenshot", "chrome-devtools/take_screenshot"]
WIKI_SEARCH = ["wikipedia/search_wikipedia", "wikipedia/wikipedia_search_wikipedia"]
WIKI_SUMMARY = ["wikipedia/get_summary", "wikipedia/wikipedia_get_summary"]
WIKI_ARTICLE = ["wikipedia/get_article", "wikipedia/wikipedia_get_article"]
WIKI_FACTS = ["wikipedia/extract_key_facts", "wikipedia/wikipedia_extract_key_facts"]
WIKI_COORDS = ["wikipedia/get_coordinates", "wikipedia/wikipedia_get_coordinates"]
GEOCODE = ["google-maps/maps_geocode", "amap/maps_geo", "baidu-map/map_geocode"]

TASKS: list[tuple[str, str, list[str | list[str]]]] = [
    # --- single tool ---------------------------------------------------------------------------
    ("en", "What time is it in Tokyo right now?", [NOW]),
    ("en", "Convert 3pm New York time to Berlin time for the call invite.", ["time/convert_time"]),
    ("en", "Show me the git status of the repo.", ["git/git_status"]),
    ("en", "What changed in the staged files? I want to review before committing.", ["git/git_diff_staged"]),
    ("en", "List the pods in the payments namespace.", ["kubernetes/kubectl_get"]),
    ("en", "Scale the checkout deployment to 6 replicas.", ["kubernetes/kubectl_scale"]),
    ("en", "Grab the logs of the api-gateway pod, it keeps restarting.", ["kubernetes/kubectl_logs"]),
    ("en", "Evaluate 17.5% of 2,340 plus 12 squared.", ["calculator/calculate"]),
    ("en", "Which tables are in the SQLite database?", ["sqlite/list_tables"]),
    (
        "en",
        "Get the transcript of this YouTube video: https://youtu.be/dQw4w9WgXcQ",
        ["youtube-transcript/get_transcript"],
    ),
    ("en", "Lint src/app.js and tell me what ESLint complains about.", ["eslint/lint-files"]),
    ("en", "Pull the design data from our Figma file so I can build the settings screen.", ["figma/get_figma_data"]),
    ("en", "Search arXiv for recent papers on speculative decoding.", ["arxiv/search_papers"]),
    ("en", "Give me the Wikipedia summary of the Treaty of Westphalia.", [WIKI_SUMMARY]),
    ("en", "Which tests are flaky in our CircleCI project?", ["circleci/find_flaky_tests"]),
    ("en", "Why did the latest CircleCI build fail? Show the failure logs.", ["circleci/get_build_failure_logs"]),
    (
        "en",
        "Look up the current docs for the React useEffect hook via Context7.",
        ["context7/resolve-library-id", "context7/query-docs"],
    ),
    ("en", "Make a pie chart of our budget: rent 40%, salaries 45%, tools 15%.", ["chart/generate_pie_chart"]),
    ("en", "Draw a mind map of the topics for the onboarding workshop.", ["chart/generate_mind_map"]),
    ("en", "Which indices exist in the Elasticsearch cluster?", ["elasticsearch/list_indices"]),
    ("en", "How many documents are in the orders collection in MongoDB?", ["mongodb/count"]),
    ("en", "List all Airtable bases I have access to.", ["airtable/list_bases"]),
    (
        "en",
        "Think this through step by step: how should we shard the user table?",
        ["sequential-thinking/sequentialthinking"],
    ),
    ("en", "Remember that Alice is the tech lead of the search team.", ["memory/create_entities"]),
    ("en", "Open https://example.com in the browser and take a screenshot.", [BROWSER_OPEN, SCREENSHOT]),
    ("en", "Run a Lighthouse audit on our landing page.", ["chrome-devtools/lighthouse_audit"]),
    ("en", "Show the directory tree of the project folder.", ["filesystem/directory_tree"]),
    ("en", "Rename notes/draft.md to notes/final.md.", ["filesystem/move_file"]),
    ("en", "Find the coffee shops near the Ferry Building in San Francisco.", ["google-maps/maps_search_places"]),
    (
        "en",
        "How long is the drive from Munich to Salzburg?",
        [["google-maps/maps_directions", "google-maps/maps_distance_matrix"]],
    ),
    # --- two or more tools -------------------------------------------------------------------------
    (
        "en",
        "Find the GitHub issue about the login timeout and post a summary of it in the #backend Slack channel.",
        ["github/search_issues", "slack/slack_post_message"],
    ),
    (
        "en",
        "Open a pull request for the cart rounding fix on GitHub and tell the team in Slack that it is ready for review.",
        ["github/create_pull_request", "slack/slack_post_message"],
    ),
    (
        "en",
        "Read the README in our GitHub repo acme/shop, then create an issue listing the outdated setup steps.",
        ["github/get_file_contents", "github/create_issue"],
    ),
    (
        "en",
        "Search the web for the latest PostgreSQL 18 release notes, fetch the page and save a summary to notes/pg18.md.",
        [WEB_SEARCH, FETCH_PAGE, WRITE_FILE],
    ),
    (
        "en",
        "Look up the Wikipedia article on the Silk Road, extract the key facts and store them in the knowledge graph.",
        [WIKI_ARTICLE, WIKI_FACTS, "memory/create_entities"],
    ),
    (
        "en",
        "Find three recent arXiv papers on retrieval-augmented generation, download the best one and export its BibTeX.",
        ["arxiv/search_papers", "arxiv/download_paper", "arxiv/export_citations"],
    ),
    (
        "en",
        "Check the pods in production that are crash looping, read their logs and post the errors to #incidents on Slack.",
        ["kubernetes/kubectl_get", "kubernetes/kubectl_logs", "slack/slack_post_message"],
    ),
    (
        "en",
        "Roll back the checkout deployment in Kubernetes and then rerun the failed CircleCI workflow.",
        ["kubernetes/kubectl_rollout", "circleci/rerun_workflow"],
    ),
    (
        "en",
        "Query the sales table in SQLite for revenue per month and draw a line chart of it.",
        ["sqlite/read_query", "chart/generate_line_chart"],
    ),
    (
        "en",
        "Run a query against Postgres for the top 10 customers by spend and put the result into a new Excel workbook.",
        ["postgres/query", "excel/create_workbook", "excel/write_range"],
    ),
    (
        "en",
        "Import data/leads.csv into a sheet, sort it by score and add a column chart of leads per region.",
        ["excel/import_csv", "excel/sort_range", "excel/create_chart"],
    ),
    (
        "en",
        "Find the Airtable record for the Berlin office and update its headcount to 42.",
        ["airtable/search_records", "airtable/update_records"],
    ),
    (
        "en",
        "Search HubSpot for contacts at Globex and log a call engagement with the first one.",
        ["hubspot/hubspot-search-objects", "hubspot/hubspot-create-engagement"],
    ),
    (
        "en",
        "Search our Notion workspace for the Q3 roadmap page and add a comment asking for the launch date.",
        ["notion/API-post-search", "notion/API-create-a-comment"],
    ),
    (
        "en",
        "Create a Notion page with the meeting notes and post the link in the #product Slack channel.",
        ["notion/API-post-page", "slack/slack_post_message"],
    ),
    (
        "en",
        "What's the weather going to be in Hangzhou tomorrow, and how do I get from the airport to West Lake by transit?",
        ["amap/maps_weather", "amap/maps_direction_transit_integrated"],
    ),
    (
        "en",
        "Geocode the address 1600 Amphitheatre Parkway and find the elevation there.",
        ["google-maps/maps_geocode", "google-maps/maps_elevation"],
    ),
    (
        "en",
        "Scrape the pricing page of competitor.io, then build a comparison table in a spreadsheet chart.",
        [FETCH_PAGE, "chart/generate_spreadsheet"],
    ),
    (
        "en",
        "Crawl docs.example.com with Firecrawl and check the crawl status until it finishes.",
        ["firecrawl/firecrawl_crawl", "firecrawl/firecrawl_check_crawl_status"],
    ),
    (
        "en",
        "Navigate to the signup page, fill in the form with test data and click submit.",
        [
            BROWSER_OPEN,
            ["playwright/browser_fill_form", "puppeteer/puppeteer_fill", "chrome-devtools/fill_form"],
            [
                "playwright/browser_click",
                "puppeteer/puppeteer_click",
                "chrome-devtools/click",
            ],
        ],
    ),
    (
        "en",
        "Open the dashboard in Chrome, list the network requests and show me the console errors.",
        [
            "chrome-devtools/navigate_page",
            "chrome-devtools/list_network_requests",
            "chrome-devtools/list_console_messages",
        ],
    ),
    (
        "en",
        "Record a performance trace of the home page in Chrome DevTools and analyze the largest contentful paint insight.",
        [
            "chrome-devtools/performance_start_trace",
            "chrome-devtools/performance_stop_trace",
            "chrome-devtools/performance_analyze_insight",
        ],
    ),
    (
        "en",
        "Create a branch fix/typo in the local git repo, stage the changed files and commit them with a message.",
        ["git/git_create_branch", "git/git_add", "git/git_commit"],
    ),
    (
        "en",
        "Show the last 5 commits in the repository and the diff of the most recent one.",
        ["git/git_log", "git/git_show"],
    ),
    (
        "en",
        "On GitLab, open a merge request from feature/search into main and assign it for approval.",
        ["gitlab/create_merge_request", "gitlab/approve_merge_request"],
    ),
    (
        "en",
        "Check whether the GitLab merge request !42 has conflicts and list its pipelines.",
        ["gitlab/get_merge_request_conflicts", "gitlab/list_merge_request_pipelines"],
    ),
    (
        "en",
        "Find the MongoDB collection schema for users, then create an index on the email field.",
        ["mongodb/collection-schema", "mongodb/create-index"],
    ),
    (
        "en",
        "Search Elasticsearch for error logs from the last hour and chart them as a column chart by service.",
        ["elasticsearch/search", "chart/generate_column_chart"],
    ),
    (
        "en",
        "Ask Tavily to research the state of solid-state batteries and save the findings to research/batteries.md.",
        ["tavily/tavily_research", WRITE_FILE],
    ),
    (
        "en",
        "Look for the DuckDuckGo results about the Rust 2024 edition and fetch the content of the first result.",
        ["duckduckgo/search", "duckduckgo/fetch_content"],
    ),
    (
        "en",
        "Map all URLs on the blog with Firecrawl, then scrape the three newest posts.",
        ["firecrawl/firecrawl_map", "firecrawl/firecrawl_scrape"],
    ),
    (
        "en",
        "Get the Wikipedia coordinates of Machu Picchu and show them on a pin map.",
        [WIKI_COORDS, "chart/generate_pin_map"],
    ),
    (
        "en",
        "Read config/settings.yaml, change the log level to debug and write the file back.",
        [READ_FILE, ["filesystem/edit_file", "filesystem/write_file"]],
    ),
    (
        "en",
        "Search the project for files named *.test.ts and show me their sizes.",
        ["filesystem/search_files", ["filesystem/get_file_info", "filesystem/list_directory_with_sizes"]],
    ),
    (
        "en",
        "Post in the #random Slack channel the current time in Sydney and react to the last message with a thumbs up.",
        [NOW, "slack/slack_post_message", "slack/slack_add_reaction"],
    ),
    (
        "en",
        "Read the latest messages in #support on Slack and reply in the thread of the first question.",
        ["slack/slack_get_channel_history", "slack/slack_reply_to_thread"],
    ),
    (
        "en",
        "Find the restaurants within 500 meters of the Eiffel Tower and get the details of the best rated one.",
        [GEOCODE, "google-maps/maps_search_places", "google-maps/maps_place_details"],
    ),
    (
        "en",
        "Install the ingress-nginx Helm chart and forward local port 8080 to the controller.",
        ["kubernetes/install_helm_chart", "kubernetes/port_forward"],
    ),
    (
        "en",
        "Drain node worker-3 for maintenance and describe the pods that were moved.",
        ["kubernetes/node_management", "kubernetes/kubectl_describe"],
    ),
    (
        "en",
        "Trigger the CircleCI pipeline for the main branch and fetch the test results of the unit job when it's done.",
        ["circleci/run_pipeline", "circleci/get_job_test_results"],
    ),
    (
        "en",
        "Get the CircleCI pipeline status for main; if it's failing open a GitHub issue with the failure logs.",
        ["circleci/get_latest_pipeline_status", "circleci/get_build_failure_logs", "github/create_issue"],
    ),
    (
        "en",
        "Fork the repo octo/widgets on GitHub, create a branch, push my two changed files and open a pull request.",
        ["github/fork_repository", "github/create_branch", "github/push_files", "github/create_pull_request"],
    ),
    (
        "en",
        "Review pull request #87: list the changed files, read the review comments and merge it if it is approved.",
        ["github/get_pull_request_files", "github/get_pull_request_reviews", "github/merge_pull_request"],
    ),
    (
        "en",
        "Write today's incident timeline to a SQLite table, then add a business insight memo about the root cause.",
        ["sqlite/write_query", "sqlite/append_insight"],
    ),
    (
        "en",
        "Search the knowledge graph for everything we know about Project Falcon and add the new deadline as an observation.",
        ["memory/search_nodes", "memory/add_observations"],
    ),
    (
        "en",
        "Download the figures from the Figma design, save them into assets/, and list the folder afterwards.",
        ["figma/download_figma_images", "filesystem/list_directory"],
    ),
    (
        "en",
        "Find the citation graph for arXiv 1706.03762 and draw the citing papers as a network graph.",
        ["arxiv/citation_graph", "chart/generate_network_graph"],
    ),
    (
        "en",
        "Watch arXiv for new papers about mixture of experts, and check the alerts now.",
        ["arxiv/watch_topic", "arxiv/check_alerts"],
    ),
    (
        "en",
        "Summarize the Wikipedia article on photosynthesis for a 10-year-old and make a flow diagram of the process.",
        [WIKI_SUMMARY, "chart/generate_flow_diagram"],
    ),
    (
        "en",
        "Take the quarterly numbers from the Excel workbook reports/q3.xlsx, read the Revenue sheet and make a waterfall chart.",
        ["excel/read_range", "chart/generate_waterfall_chart"],
    ),
    (
        "en",
        "Create a pivot table in the sales workbook summarizing revenue by region and add a slicer for the year.",
        ["excel/create_pivot_table", "excel/add_slicer"],
    ),
    (
        "en",
        "Highlight the cells above 1000 in red with conditional formatting and freeze the header row.",
        ["excel/add_conditional_format", "excel/set_sheet_layout"],
    ),
    (
        "en",
        "Check which tools the Firecrawl account has credits for, then run an agent job to collect the prices of the top 10 laptops.",
        ["firecrawl/firecrawl_credit_usage", "firecrawl/firecrawl_agent"],
    ),
    (
        "en",
        "Compare what Brave and DuckDuckGo return for 'best static site generator' and fetch the top page from each.",
        ["brave-search/brave_web_search", "duckduckgo/search", FETCH_PAGE],
    ),
    (
        "en",
        "Find a pizza place nearby with Brave local search and get directions there by foot.",
        ["brave-search/brave_local_search", "google-maps/maps_directions"],
    ),
    (
        "en",
        "Which HubSpot workflows exist? Get the details of the onboarding workflow.",
        ["hubspot/hubspot-list-workflows", "hubspot/hubspot-get-workflow"],
    ),
    (
        "en",
        "Create a new Airtable table 'Vendors' with fields name, email and contract end, then add our first vendor.",
        ["airtable/create_table", "airtable/create_record"],
    ),
    (
        "en",
        "Query the Notion tasks database for overdue items and post them to Slack, then update each page's status.",
        ["notion/API-query-data-source", "slack/slack_post_message", "notion/API-patch-page"],
    ),
    (
        "en",
        "Get the current time in UTC, write a release note file with it, commit it in git and push a GitHub release branch.",
        [NOW, WRITE_FILE, "git/git_commit", "github/create_branch"],
    ),
    # --- German, Spanish, Chinese --------------------------------------------------------------------
    ("de", "Wie spät ist es gerade in San Francisco?", [NOW]),
    (
        "de",
        "Lies die Datei docs/setup.md und dann erstelle daraus ein GitHub-Issue mit den offenen Punkten.",
        [READ_FILE, "github/create_issue"],
    ),
    (
        "de",
        "Suche im Web nach den Öffnungszeiten des Deutschen Museums und speichere sie in notizen/museum.md.",
        [WEB_SEARCH, WRITE_FILE],
    ),
    (
        "de",
        "Zeig mir die letzten Commits im Repository und erstelle einen neuen Branch für das Hotfix.",
        ["git/git_log", "git/git_create_branch"],
    ),
    (
        "de",
        "Skaliere das Deployment frontend auf drei Replikate und zeig mir danach die Logs.",
        ["kubernetes/kubectl_scale", "kubernetes/kubectl_logs"],
    ),
    (
        "de",
        "Erstelle ein Balkendiagramm der Umsätze pro Quartal: Q1 120, Q2 150, Q3 90, Q4 200.",
        [["chart/generate_bar_chart", "chart/generate_column_chart"]],
    ),
    ("es", "¿Qué hora es ahora en Ciudad de México?", [NOW]),
    (
        "es",
        "Busca en Wikipedia el artículo sobre la Alhambra y guarda un resumen en el grafo de conocimiento.",
        [WIKI_SEARCH, WIKI_SUMMARY, "memory/create_entities"],
    ),
    (
        "es",
        "Consulta la base de datos SQLite para ver las ventas de marzo y genera un gráfico circular con el resultado.",
        ["sqlite/read_query", "chart/generate_pie_chart"],
    ),
    (
        "es",
        "Abre la página de inicio de sesión en el navegador, rellena el formulario y haz una captura de pantalla.",
        [
            BROWSER_OPEN,
            ["playwright/browser_fill_form", "puppeteer/puppeteer_fill", "chrome-devtools/fill_form"],
            SCREENSHOT,
        ],
    ),
    (
        "es",
        "Envía un mensaje al canal #ventas de Slack con el número de documentos de la colección pedidos en MongoDB.",
        ["mongodb/count", "slack/slack_post_message"],
    ),
    ("zh", "现在北京时间几点？", [NOW]),
    ("zh", "查询一下杭州明天的天气。", [["amap/maps_weather", "baidu-map/map_weather"]]),
    (
        "zh",
        "帮我规划从上海虹桥站到外滩的驾车路线，然后查一下外滩附近的餐厅。",
        [
            ["amap/maps_direction_driving", "baidu-map/map_directions"],
            ["amap/maps_around_search", "baidu-map/map_search_places"],
        ],
    ),
    ("zh", "今天晚饭不知道吃什么，三个人，帮我推荐几道菜。", ["howtocook/mcp_howtocook_whatToEat"]),
    (
        "zh",
        "给我看看红烧肉的完整做法，然后把菜谱保存到文件 recipes/hongshaorou.md。",
        ["howtocook/mcp_howtocook_getRecipeById", WRITE_FILE],
    ),
    (
        "zh",
        "根据IP地址 114.114.114.114 查一下所在城市，再查询那里的天气。",
        [["amap/maps_ip_location", "baidu-map/map_ip_location"], ["amap/maps_weather", "baidu-map/map_weather"]],
    ),
    ("zh", "查询北京长安街现在的拥堵情况。", ["baidu-map/map_road_traffic"]),
    (
        "zh",
        "用柱状图展示每个月的销售额，数据在 SQLite 数据库的 sales 表里。",
        ["sqlite/read_query", "chart/generate_column_chart"],
    ),
    (
        "zh",
        "在 arXiv 上搜索关于大语言模型推理的最新论文，并下载第一篇。",
        ["arxiv/search_papers", "arxiv/download_paper"],
    ),
    (
        "zh",
        "把这段会议纪要写到 notes/meeting.md，然后在 Slack 的 #team 频道通知大家。",
        [WRITE_FILE, "slack/slack_post_message"],
    ),
    (
        "zh",
        "为下周设计一份四口之家的膳食计划，并给出购物清单。",
        ["howtocook/mcp_howtocook_recommendMeals"],
    ),
    (
        "zh",
        "计算一下从天安门到颐和园的骑行距离和时间。",
        [["amap/maps_bicycling", "amap/maps_distance"]],
    ),
    # --- longer multi-step tasks ------------------------------------------------------------------
    (
        "en",
        "I'm preparing the weekly engineering report. Get the latest CircleCI pipeline status, list the open GitHub "
        "pull requests, count the new issues this week, chart the numbers as a bar chart and post the chart in the "
        "#eng-weekly Slack channel.",
        [
            "circleci/get_latest_pipeline_status",
            "github/list_pull_requests",
            ["github/list_issues", "github/search_issues"],
            ["chart/generate_bar_chart", "chart/generate_column_chart"],
            "slack/slack_post_message",
        ],
    ),
    (
        "en",
        "We are planning a team offsite in Lisbon. Search the web for venues, get the place details of the two best "
        "ones on Google Maps, compute the travel time from the airport to each, and write everything to "
        "offsite/plan.md.",
        [
            WEB_SEARCH,
            "google-maps/maps_place_details",
            ["google-maps/maps_distance_matrix", "google-maps/maps_directions"],
            WRITE_FILE,
        ],
    ),
    (
        "en",
        "Research task: search arXiv for papers on tool retrieval for LLM agents, read the abstract of the top three, "
        "look up the term 'dense retrieval' on Wikipedia for background, and save a literature note to the knowledge graph.",
        ["arxiv/search_papers", "arxiv/get_abstract", [*WIKI_SUMMARY, *WIKI_ARTICLE], "memory/create_entities"],
    ),
    (
        "en",
        "Our site is slow. Open the home page in Chrome DevTools, run a Lighthouse audit, list the network requests, "
        "then create a GitLab issue with the three biggest problems.",
        [
            "chrome-devtools/navigate_page",
            "chrome-devtools/lighthouse_audit",
            "chrome-devtools/list_network_requests",
            "gitlab/create_issue",
        ],
    ),
    (
        "en",
        "Move our customer list from Airtable to HubSpot: list the records in the Customers table, create them as "
        "HubSpot contacts in a batch, and associate each with its company.",
        ["airtable/list_records", "hubspot/hubspot-batch-create-objects", "hubspot/hubspot-batch-create-associations"],
    ),
    (
        "en",
        "The orders service is down. Describe the deployment in Kubernetes, exec into the pod to check the disk, "
        "look at the MongoDB logs, and post a status update in #incidents.",
        ["kubernetes/kubectl_describe", "kubernetes/exec_in_pod", "mongodb/mongodb-logs", "slack/slack_post_message"],
    ),
    (
        "en",
        "Build a dashboard workbook: create a new Excel workbook, import sales.csv, add a PivotTable by product, a "
        "column chart of it, and export the summary sheet as CSV.",
        [
            "excel/create_workbook",
            "excel/import_csv",
            "excel/create_pivot_table",
            "excel/create_chart",
            "excel/export_csv",
        ],
    ),
    (
        "en",
        "Check what the Context7 docs say about Next.js middleware, fetch the Next.js blog post on it, compare them "
        "and write the differences to docs/middleware.md.",
        ["context7/resolve-library-id", "context7/query-docs", FETCH_PAGE, WRITE_FILE],
    ),
]

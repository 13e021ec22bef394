"""Writes tools.jsonl, servers.jsonl and queries.jsonl of the hand-written multi-server task set.

    python benchmarks/data/mcp_tasks/build.py

Written for contextsieve (not taken from any data set): 10 MCP servers shaped like popular real
ones, with overlapping tool names across servers (search / list / create / get), some thin
descriptions and some in German, Spanish or French; 48 tasks, most needing tools from two or three
servers. ``relevant`` lists ``server/tool``; ``split`` is ``single`` or ``multi``. ``results.jsonl``:
10 tool-result cases (a message, the text its first tool returned, the tools needed next) for
measuring ``session.expand_from``.
"""

import argparse
import json
from pathlib import Path

SERVERS = {
    "github": "GitHub: repositories, issues, pull requests and code search",
    "jira": "Jira Cloud issue tracking for software teams: tickets, sprints, boards",
    "slack": "Slack workspace messaging: channels, direct messages, users",
    "gmail": "Google Mail: read, search and send email",
    "gcal": "Google Calendar events and availability",
    "postgres": "Read-only access to the company PostgreSQL analytics database",
    "filesystem": "Local files in the project folder",
    "browser": "Headless web browser (Playwright) for visiting and scraping web pages",
    "weather": "Wetterdaten: aktuelle Bedingungen und Vorhersagen",
    "stripe": "Stripe payments: customers, invoices, refunds, subscriptions",
}

TOOLS = [
    ("github", "search_code", "Search for code across GitHub repositories"),
    ("github", "search_issues", "Search issues and pull requests"),
    ("github", "create_issue", "Create a new issue in a repository"),
    ("github", "get_issue", "Get an issue by number"),
    ("github", "create_pull_request", "Open a pull request from a branch"),
    ("github", "list_commits", "List commits of a branch"),
    ("github", "get_file_contents", "Get the contents of a file or directory"),
    ("github", "add_issue_comment", "Comment on an issue"),
    ("github", "merge_pull_request", "Merge a pull request"),
    ("jira", "searchIssues", "Search using JQL"),
    ("jira", "createIssue", "Create"),
    ("jira", "transitionIssue", "Move a ticket to another status (e.g. In Progress, Done)"),
    ("jira", "getSprint", "Active sprint and its tickets for a board"),
    ("jira", "addComment", "Add a comment"),
    ("jira", "assignIssue", "Assign a ticket to a user"),
    ("slack", "post_message", "Post a message to a channel"),
    ("slack", "list_channels", "List public channels"),
    ("slack", "get_channel_history", "Recent messages in a channel"),
    ("slack", "search_messages", "Search"),
    ("slack", "send_dm", "Send a direct message to a user"),
    ("slack", "get_user_profile", "Profile of a workspace member: name, title, time zone"),
    ("gmail", "search_emails", "Search mail with Gmail query syntax"),
    ("gmail", "read_email", "Read a message"),
    ("gmail", "send_email", "Send an email"),
    ("gmail", "create_draft", "Save a draft"),
    ("gmail", "list_labels", "Labels"),
    ("gcal", "list_events", "Events between two dates"),
    ("gcal", "create_event", "Create a calendar event and invite attendees"),
    ("gcal", "find_free_time", "Find free slots shared by several people"),
    ("gcal", "delete_event", "Cancel an event"),
    ("postgres", "query", "Run a read-only SQL query"),
    ("postgres", "list_tables", "List tables"),
    ("postgres", "describe_table", "Columns and types of a table"),
    ("filesystem", "read_file", "Read a file"),
    ("filesystem", "write_file", "Create or overwrite a file"),
    ("filesystem", "list_directory", "List a directory"),
    ("filesystem", "search_files", "Find files whose names match a pattern"),
    ("filesystem", "move_file", "Move or rename a file"),
    ("browser", "navigate", "Open a URL"),
    ("browser", "screenshot", "Take a screenshot of the current page"),
    ("browser", "click", "Click an element"),
    ("browser", "fill", "Fill a form field"),
    ("browser", "get_text", "Text content of the page"),
    ("weather", "aktuelles_wetter", "Aktuelles Wetter für einen Ort: Temperatur, Wind, Niederschlag"),
    ("weather", "vorhersage", "Wettervorhersage für die nächsten sieben Tage"),
    ("weather", "unwetterwarnungen", "Amtliche Unwetterwarnungen für eine Region"),
    ("stripe", "list_customers", "Lista de clientes, con filtro por correo electrónico"),
    ("stripe", "create_refund", "Reembolsar un pago total o parcialmente"),
    ("stripe", "list_invoices", "Factures d'un client"),
    ("stripe", "create_invoice", "Créer une facture"),
    ("stripe", "cancel_subscription", "Annuler un abonnement"),
    ("stripe", "retrieve_balance", "Balance"),
]

TASKS = [
    # (query, relevant tools)
    (
        "Find the GitHub issue about the login timeout and post a summary of it in #backend on Slack.",
        ["github/search_issues", "slack/post_message"],
    ),
    (
        "Create a Jira ticket for the failing nightly build and assign it to Maria.",
        ["jira/createIssue", "jira/assignIssue"],
    ),
    ("What's on my calendar tomorrow, and is it going to rain?", ["gcal/list_events", "weather/vorhersage"]),
    ("Refund the last payment of customer jane@example.com.", ["stripe/list_customers", "stripe/create_refund"]),
    ("Email the March invoice to the customer Acme Corp.", ["stripe/list_invoices", "gmail/send_email"]),
    (
        "Find a free hour next week for me, Tom and Priya and send them an invite for the design review.",
        ["gcal/find_free_time", "gcal/create_event"],
    ),
    ("How many orders did we get last month? Check the database.", ["postgres/query"]),
    ("Which columns does the orders table have?", ["postgres/describe_table"]),
    (
        "Read the README in the project folder and open a pull request that fixes its typos.",
        ["filesystem/read_file", "github/create_pull_request"],
    ),
    ("Take a screenshot of our pricing page.", ["browser/navigate", "browser/screenshot"]),
    (
        "Move the ticket PROJ-123 to Done and comment that the fix is deployed.",
        ["jira/transitionIssue", "jira/addComment"],
    ),
    ("What did people say in the #incidents channel today?", ["slack/get_channel_history"]),
    (
        "Search my email for the contract from the lawyer and save it to contracts/lawyer.txt.",
        ["gmail/search_emails", "filesystem/write_file"],
    ),
    ("Is there a storm warning for Bavaria this weekend?", ["weather/unwetterwarnungen"]),
    ("Show me the current temperature in Berlin.", ["weather/aktuelles_wetter"]),
    (
        "Cancel the subscription of customer 4411 and send them a confirmation email.",
        ["stripe/cancel_subscription", "gmail/send_email"],
    ),
    ("Find where the function parse_config is defined in our repos.", ["github/search_code"]),
    (
        "What's in the current sprint, and message the team a short status in Slack.",
        ["jira/getSprint", "slack/post_message"],
    ),
    (
        "Scrape the headlines from the news site and write them to a file.",
        ["browser/navigate", "browser/get_text", "filesystem/write_file"],
    ),
    ("List the tables in the analytics database.", ["postgres/list_tables"]),
    (
        "Draft a reply to the latest email from my manager.",
        ["gmail/search_emails", "gmail/read_email", "gmail/create_draft"],
    ),
    (
        "Who is Alex on Slack and what time zone is he in? Then schedule a call with him.",
        ["slack/get_user_profile", "gcal/create_event"],
    ),
    (
        "Merge pull request 42 and close the matching Jira ticket.",
        ["github/merge_pull_request", "jira/transitionIssue"],
    ),
    ("Find all CSV files in the data folder.", ["filesystem/search_files"]),
    (
        "Log into the admin page and fill in the new shipping address.",
        ["browser/navigate", "browser/fill", "browser/click"],
    ),
    ("What is our Stripe balance right now?", ["stripe/retrieve_balance"]),
    ("Create an invoice for Acme for 40 hours of consulting.", ["stripe/create_invoice"]),
    (
        "Cancel my 3pm meeting and tell the attendees on Slack.",
        ["gcal/list_events", "gcal/delete_event", "slack/post_message"],
    ),
    (
        "Open a GitHub issue for the bug described in the last message in #support.",
        ["slack/get_channel_history", "github/create_issue"],
    ),
    ("Add a comment on GitHub issue 87 saying that it is fixed in v2.3.", ["github/add_issue_comment"]),
    ("Search Slack for the discussion about the database migration.", ["slack/search_messages"]),
    ("Which Jira tickets mention the payment API?", ["jira/searchIssues"]),
    ("Show the last ten commits on main.", ["github/list_commits"]),
    ("Rename report_final.docx to report_2026.docx.", ["filesystem/move_file"]),
    ("Query the signups per day this week and post the numbers in #growth.", ["postgres/query", "slack/post_message"]),
    ("Send Priya a direct message that the deploy is done.", ["slack/send_dm"]),
    ("Get the config.yaml from the infra repository.", ["github/get_file_contents"]),
    (
        "Will it be sunny in Munich on Friday? If so, book a team lunch on the calendar.",
        ["weather/vorhersage", "gcal/create_event"],
    ),
    ("List all invoices of customer María López.", ["stripe/list_customers", "stripe/list_invoices"]),
    ("Which labels do I have in Gmail?", ["gmail/list_labels"]),
    ("What files are in the src directory?", ["filesystem/list_directory"]),
    ("Click the 'export' button on the dashboard page and download the report.", ["browser/navigate", "browser/click"]),
    (
        "Find the customer's refund request email and issue the refund in Stripe.",
        ["gmail/search_emails", "stripe/create_refund"],
    ),
    (
        "Create a Jira bug from GitHub issue 311 and link them with a comment on the GitHub issue.",
        ["github/get_issue", "jira/createIssue", "github/add_issue_comment"],
    ),
    (
        "Read the error log file and search GitHub issues for the same error message.",
        ["filesystem/read_file", "github/search_issues"],
    ),
    ("Which public Slack channels exist?", ["slack/list_channels"]),
    (
        "Write the result of the top-customers SQL query to top_customers.csv.",
        ["postgres/query", "filesystem/write_file"],
    ),
    (
        "Check the weather warnings and, if there is one, email the field team.",
        ["weather/unwetterwarnungen", "gmail/send_email"],
    ),
]


# Tool-result expansion cases: (the user's message, the text a first tool returned, tools needed next
# that the message alone does not name).
RESULTS = [
    (
        "Look at GitHub issue 311.",
        "Issue #311: Checkout fails for EU customers. Reported by support; the customer asked for a refund of the failed payment. Tracked in Jira as PAY-88.",
        ["stripe/create_refund", "jira/searchIssues"],
    ),
    (
        "What did the lawyer send me?",
        "From: lawyer@firm.example. Subject: contract v3. Please save the attached contract text to the shared project folder and put a signing meeting on the calendar next week.",
        ["filesystem/write_file", "gcal/create_event"],
    ),
    (
        "What's new in #incidents?",
        "09:12 alice: the signups table stopped updating at 03:00, can someone check the database? 09:15 bob: probably the nightly job, see the commit on main from yesterday.",
        ["postgres/query", "github/list_commits"],
    ),
    (
        "Show me today's events.",
        "10:00 Outdoor team lunch in Munich park. 15:00 Call with Acme about their unpaid invoice.",
        ["weather/vorhersage", "stripe/list_invoices"],
    ),
    (
        "Read notes.txt.",
        "TODO: open a ticket for the login bug, message Priya about the deploy, and take a screenshot of the new landing page.",
        ["jira/createIssue", "slack/send_dm", "browser/screenshot"],
    ),
    (
        "What's in the current sprint?",
        "PROJ-7 Update the pricing page text (In Progress). PROJ-9 Fix the typo in the README file (To Do).",
        ["browser/navigate", "filesystem/read_file"],
    ),
    (
        "Get the customer record for jane@example.com.",
        "Customer cus_123, Jane Roe, subscription active, last invoice failed twice; she emailed support about cancelling.",
        ["stripe/cancel_subscription", "gmail/search_emails"],
    ),
    (
        "Open our status page.",
        "Status page text: Degraded performance in the EU region. Severe weather warning affecting our Frankfurt data center.",
        ["weather/unwetterwarnungen", "slack/post_message"],
    ),
    ("List the tables.", "orders, customers, refunds, invoices_archive", ["postgres/describe_table"]),
    (
        "Search the repo for the config loader.",
        "src/config.py: def parse_config(path): reads config.yaml from the project folder; see open pull request 57 for the rewrite.",
        ["filesystem/read_file", "github/merge_pull_request"],
    ),
]


def main() -> None:
    here = Path(__file__).parent
    names = {f"{s}/{n}" for s, n, _ in TOOLS}
    for _, rel in TASKS:
        assert set(rel) <= names, set(rel) - names
    lines = [json.dumps({"server": s, "name": n, "description": d}, ensure_ascii=False) for s, n, d in TOOLS]
    (here / "tools.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    lines = [json.dumps({"server": s, "description": d}, ensure_ascii=False) for s, d in SERVERS.items()]
    (here / "servers.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    lines = [
        json.dumps(
            {"id": f"task-{i}", "query": q, "relevant": rel, "split": "multi" if len(rel) > 1 else "single"},
            ensure_ascii=False,
        )
        for i, (q, rel) in enumerate(TASKS)
    ]
    (here / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for _, _, nxt in RESULTS:
        assert set(nxt) <= names, set(nxt) - names
    lines = [
        json.dumps({"id": f"result-{i}", "query": q, "result": r, "next": n}, ensure_ascii=False)
        for i, (q, r, n) in enumerate(RESULTS)
    ]
    (here / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()

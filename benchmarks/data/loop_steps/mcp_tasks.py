"""Step annotations of ``benchmarks/data/mcp_tasks``'s tasks, written for contextsieve by hand: each
task's steps as an agent loop sends them to the selector one at a time, with the tools each step
needs (see :mod:`benchmarks.data.loop_steps.steps` for the spec). The first step is the task's own
message (``queries.jsonl``'s ``query``, checked by ``build.py``); later steps are what a host sends
next, in three kinds on purpose: the model's next intent in its own words, a short follow-up that
names only the task's object ("now assign it"), or the previous tool's result summarised (which names
things, not the action). Every task of the set is annotated; the union of a task's step needs holds
the task's ``relevant`` tools (build.py checks), with a few tools added where a step needs one the
whole-task annotation did not list (e.g. reading the email a search found).
"""

from __future__ import annotations

# task id -> (tools of the first step, (text, tools) of each later step); the first step's text is the query.
STEPS: dict[str, tuple] = {
    "task-0": (
        ["github/search_issues"],
        (
            "Found #412 'Login times out after 30 s on slow networks', opened 3 days ago, 14 comments. "
            "Now post a short summary of it to #backend.",
            ["slack/post_message"],
        ),
    ),
    "task-1": (
        ["jira/createIssue"],
        ("Created OPS-981. Assign it to Maria.", ["jira/assignIssue"]),
    ),
    "task-2": (
        ["gcal/list_events"],
        ("Two meetings tomorrow: standup at 9 and a client visit at 14:00. Now the rain.", ["weather/vorhersage"]),
    ),
    "task-3": (
        ["stripe/list_customers"],
        ("Customer cus_J8k2 (Jane Doe); last charge ch_91 of 49 EUR on May 3. Refund it.", ["stripe/create_refund"]),
    ),
    "task-4": (
        ["stripe/list_customers"],
        ("Acme Corp is cus_A11. Get its invoices from March.", ["stripe/list_invoices"]),
        ("Invoice in_778 for March, 2,400 EUR, PDF link attached. Now email it to them.", ["gmail/send_email"]),
    ),
    "task-5": (
        ["gcal/find_free_time"],
        ("Tuesday 10:00-11:00 is free for all three.", []),
        ("Book it and invite Tom and Priya.", ["gcal/create_event"]),
    ),
    "task-6": (
        [("postgres/query", "postgres/list_tables")],
        ("Which table holds the orders? Check the columns first.", ["postgres/describe_table"]),
        ("Count the rows of orders with created_at in last month.", ["postgres/query"]),
    ),
    "task-8": (
        [("filesystem/read_file", "filesystem/list_directory")],
        ("Fixed three typos: 'recieve', 'seperate', 'occured'. Save the corrected file.", ["filesystem/write_file"]),
        ("Now open the PR with the fix.", ["github/create_pull_request"]),
    ),
    "task-9": (
        ["browser/navigate"],
        ("The page loaded: example.com/pricing, title 'Plans and pricing'.", ["browser/screenshot"]),
    ),
    "task-10": (
        ["jira/transitionIssue"],
        ("PROJ-123 is Done now. Add the comment.", ["jira/addComment"]),
    ),
    "task-11": (
        [("slack/get_channel_history", "slack/list_channels")],
        ("Summarise what they said in three bullet points.", []),
    ),
    "task-12": (
        ["gmail/search_emails"],
        ("Found one: 'Contract v3' from lawyer@firm.example, yesterday.", ["gmail/read_email"]),
        ("Now save it.", ["filesystem/write_file"]),
    ),
    "task-15": (
        ["stripe/cancel_subscription"],
        ("Subscription sub_4411 cancelled at period end (June 30).", []),
        ("Send them the confirmation.", ["gmail/send_email"]),
    ),
    "task-16": (
        ["github/search_code"],
        ("It is in config/loader.py of the api repo. Show me that file.", ["github/get_file_contents"]),
    ),
    "task-17": (
        ["jira/getSprint"],
        ("Sprint 42: 11 tickets, 7 done, 2 in review, 2 blocked.", []),
        ("Post that status to the team.", ["slack/post_message"]),
    ),
    "task-18": (
        ["browser/navigate"],
        ("The news site is open.", ["browser/get_text"]),
        ("Got 12 headlines. Write them to headlines.txt.", ["filesystem/write_file"]),
    ),
    "task-20": (
        ["gmail/search_emails"],
        ("Latest from my manager: 'Q3 planning' sent this morning. Open it.", ["gmail/read_email"]),
        ("She asks for the budget by Friday. Write the reply as a draft, don't send.", ["gmail/create_draft"]),
    ),
    "task-21": (
        ["slack/get_user_profile"],
        ("Alex Kim, staff engineer, time zone America/Los_Angeles.", []),
        ("Now schedule the call with him, 30 minutes, his morning.", ["gcal/create_event"]),
    ),
    "task-22": (
        ["github/merge_pull_request"],
        ("PR #42 merged into main. Which Jira ticket does it fix?", ["jira/searchIssues"]),
        ("It is PROJ-77. Close it.", ["jira/transitionIssue"]),
    ),
    "task-24": (
        ["browser/navigate"],
        ("Login form: fields 'user' and 'password'.", ["browser/fill"]),
        ("Press the sign-in button.", ["browser/click"]),
        ("Now the shipping address form: street, city, postcode.", ["browser/fill"]),
        ("Save it.", ["browser/click"]),
    ),
    "task-26": (
        [("stripe/list_customers", "stripe/create_invoice")],
        ("Acme is cus_A11. Create the invoice: 40 hours at 120 EUR.", ["stripe/create_invoice"]),
    ),
    "task-27": (
        ["gcal/list_events"],
        ("The 3pm is 'Vendor sync' with Lena and Omar. Cancel it.", ["gcal/delete_event"]),
        ("Tell them.", ["slack/post_message"]),
    ),
    "task-28": (
        ["slack/get_channel_history"],
        ("Last message in #support: 'CSV export crashes when a name has a comma' from Dana.", []),
        ("File it on GitHub.", ["github/create_issue"]),
    ),
    "task-32": (
        ["github/list_commits"],
        ("Which of these touched the payment code? Show me the diff of the latest one.", ["github/get_file_contents"]),
    ),
    "task-34": (
        ["postgres/query"],
        ("Mon 120, Tue 98, Wed 143, Thu 131, Fri 117.", []),
        ("Post the numbers.", ["slack/post_message"]),
    ),
    "task-37": (
        ["weather/vorhersage"],
        ("Friday: sunny, 24 °C in Munich.", []),
        ("Great, book the lunch.", ["gcal/create_event"]),
    ),
    "task-38": (
        ["stripe/list_customers"],
        ("María López is cus_M55.", ["stripe/list_invoices"]),
    ),
    "task-41": (
        ["browser/navigate"],
        ("Dashboard open; the export button is at the top right.", ["browser/click"]),
        ("A download link appeared. Take a screenshot so I can see it.", ["browser/screenshot"]),
    ),
    "task-42": (
        ["gmail/search_emails"],
        ("The email is from bob@shop.example: he wants his 80 EUR back for order 5521.", ["stripe/list_customers"]),
        ("He is cus_B02, charge ch_5521. Go ahead.", ["stripe/create_refund"]),
    ),
    "task-43": (
        ["github/get_issue"],
        ("Issue #311: 'Checkout fails for EU customers'.", ["jira/createIssue"]),
        ("Jira bug PAY-88 created. Now link it on the GitHub side.", ["github/add_issue_comment"]),
    ),
    "task-44": (
        [("filesystem/read_file", "filesystem/search_files")],
        ("Last error: 'ConnectionResetError: pool exhausted after 30 retries'.", ["github/search_issues"]),
    ),
    "task-46": (
        ["postgres/query"],
        ("10 rows: customer, orders, revenue.", ["filesystem/write_file"]),
    ),
    "task-47": (
        ["weather/unwetterwarnungen"],
        ("Warning level 3: thunderstorms with hail for Upper Bavaria tomorrow afternoon.", []),
        ("Email the field team about it.", ["gmail/send_email"]),
    ),
    "task-7": (
        ["postgres/describe_table"],
        ("Which of them are nullable? And give me ten sample rows.", ["postgres/query"]),
    ),
    "task-19": (
        ["postgres/list_tables"],
        ("Describe the biggest one, events.", ["postgres/describe_table"]),
    ),
    "task-23": (
        ["filesystem/search_files"],
        ("Found sales_2024.csv, sales_2025.csv and users.csv. Open the first one.", ["filesystem/read_file"]),
    ),
    "task-29": (["github/add_issue_comment"],),
    "task-31": (
        ["jira/searchIssues"],
        ("PAY-12, PAY-40 and OPS-7. Move PAY-40 to In Progress.", ["jira/transitionIssue"]),
    ),
    "task-33": (["filesystem/move_file"],),
    "task-36": (
        ["github/get_file_contents"],
        ("Save a copy locally as config.yaml.", ["filesystem/write_file"]),
    ),
    "task-40": (
        ["filesystem/list_directory"],
        ("Open main.py.", ["filesystem/read_file"]),
    ),
}

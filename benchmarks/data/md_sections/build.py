"""Writes docs.jsonl and questions.jsonl of the hand-written markdown section set.

    python benchmarks/data/md_sections/build.py

Written for contextsieve (not taken from any data set) to measure heading paths in contextual
embeddings: three markdown references whose sections repeat the same sub-headings under different
parents (Install under Linux, macOS and Windows; Create under Users, Orders and Invoices; Restore
under Postgres, Redis and Kafka), with section bodies that, as in much real documentation, often do
not repeat their parent's name. One question per section; the answer is the (document, heading path).
"""

import argparse
import json
from pathlib import Path

DOCS = {
    "install-guide": (
        "Installing and running Acme CLI",
        {
            (
                "Linux",
                "Install",
            ): "Add the package repository, then run sudo apt install acme. The binary lands in /usr/bin.",
            (
                "Linux",
                "Configure",
            ): "Settings live in /etc/acme/config.toml; restart the systemd unit after editing it.",
            ("Linux", "Upgrade"): "Run sudo apt update and sudo apt upgrade acme; the service restarts on its own.",
            (
                "Linux",
                "Uninstall",
            ): "Run sudo apt remove acme, then delete /etc/acme if you want the settings gone too.",
            ("macOS", "Install"): "Run brew install acme. Apple silicon and Intel builds are both provided.",
            ("macOS", "Configure"): "Settings live in ~/Library/Application Support/acme/config.toml.",
            ("macOS", "Upgrade"): "Run brew upgrade acme. Grant the new binary disk access again if asked.",
            ("macOS", "Uninstall"): "Run brew uninstall acme and drag the menu bar helper to the bin.",
            ("Windows", "Install"): "Download the MSI and double-click it; it asks for administrator rights.",
            ("Windows", "Configure"): "Settings live in %APPDATA%\\acme\\config.toml; the tray icon reloads them.",
            ("Windows", "Upgrade"): "Run the newer MSI over the old one; your settings are kept.",
            ("Windows", "Uninstall"): "Open Apps and features, pick Acme CLI and choose Uninstall.",
        },
    ),
    "api-reference": (
        "REST API reference",
        {
            ("Users", "Create"): "POST /v1/users with an email and a display name. Returns 201 and the new id.",
            ("Users", "List"): "GET /v1/users?page=N returns 50 records a page, newest first.",
            ("Users", "Delete"): "DELETE /v1/users/{id}. The record is kept for 30 days, then purged.",
            ("Users", "Errors"): "409 when the email is taken; 422 when the display name is empty.",
            (
                "Orders",
                "Create",
            ): "POST /v1/orders with a customer id and line items. Returns 201 and the order number.",
            ("Orders", "List"): "GET /v1/orders?status=open filters by status; results are paged by 100.",
            ("Orders", "Delete"): "Only draft records can be deleted; others must be cancelled instead.",
            ("Orders", "Errors"): "409 when a line item is out of stock; 402 when the payment fails.",
            ("Invoices", "Create"): "POST /v1/invoices with an order number; totals and tax are computed for you.",
            ("Invoices", "List"): "GET /v1/invoices?due_before=DATE lists unpaid ones due before a date.",
            ("Invoices", "Delete"): "Issued documents cannot be deleted, only voided with POST .../void.",
            ("Invoices", "Errors"): "422 when the order is not yet fulfilled; 409 when it was already billed.",
        },
    ),
    "runbook": (
        "Operations runbook",
        {
            ("Postgres", "Backup"): "A nightly base backup plus WAL archiving to the object store; keep 14 days.",
            ("Postgres", "Restore"): "Stop the service, restore the base backup, replay WAL up to the target time.",
            ("Postgres", "Alerts"): "Page when replication lag exceeds 60 seconds or connections exceed 90 percent.",
            ("Redis", "Backup"): "RDB snapshots every 15 minutes, copied off the host hourly.",
            ("Redis", "Restore"): "Stop the server, put the snapshot file in the data directory, start it again.",
            ("Redis", "Alerts"): "Page when memory use passes 85 percent or evictions climb above zero.",
            ("Kafka", "Backup"): "Topics are mirrored to the standby cluster; broker configs are in git.",
            ("Kafka", "Restore"): "Fail consumers over to the standby cluster, then re-seed the lost brokers from it.",
            ("Kafka", "Alerts"): "Page on under-replicated partitions or consumer lag above 10,000 messages.",
        },
    ),
}

QUESTIONS = [
    ("How do I install it on Ubuntu?", "install-guide", ("Linux", "Install")),
    ("Where is the config file on a Linux server?", "install-guide", ("Linux", "Configure")),
    ("How do I upgrade to the latest version on Linux?", "install-guide", ("Linux", "Upgrade")),
    ("How do I remove it from a Linux box?", "install-guide", ("Linux", "Uninstall")),
    ("How do I install it on my Mac?", "install-guide", ("macOS", "Install")),
    ("Where are the settings stored on macOS?", "install-guide", ("macOS", "Configure")),
    ("How do I update it on a Mac?", "install-guide", ("macOS", "Upgrade")),
    ("How do I uninstall it on macOS?", "install-guide", ("macOS", "Uninstall")),
    ("How do I set it up on Windows?", "install-guide", ("Windows", "Install")),
    ("Which file holds the configuration on Windows?", "install-guide", ("Windows", "Configure")),
    ("How do I move to a newer version on Windows?", "install-guide", ("Windows", "Upgrade")),
    ("How do I get rid of it on a Windows PC?", "install-guide", ("Windows", "Uninstall")),
    ("How do I create a new user through the API?", "api-reference", ("Users", "Create")),
    ("How can I list all users?", "api-reference", ("Users", "List")),
    ("What happens when I delete a user?", "api-reference", ("Users", "Delete")),
    ("Why does creating a user fail with 409?", "api-reference", ("Users", "Errors")),
    ("How do I place an order with the API?", "api-reference", ("Orders", "Create")),
    ("How do I fetch only the open orders?", "api-reference", ("Orders", "List")),
    ("Can I delete an order?", "api-reference", ("Orders", "Delete")),
    ("Which errors can creating an order return?", "api-reference", ("Orders", "Errors")),
    ("How do I create an invoice?", "api-reference", ("Invoices", "Create")),
    ("How do I list unpaid invoices?", "api-reference", ("Invoices", "List")),
    ("How do I delete an invoice?", "api-reference", ("Invoices", "Delete")),
    ("Why does invoicing an order return 422?", "api-reference", ("Invoices", "Errors")),
    ("How are the Postgres databases backed up?", "runbook", ("Postgres", "Backup")),
    ("How do I restore Postgres to a point in time?", "runbook", ("Postgres", "Restore")),
    ("When do we get paged for Postgres?", "runbook", ("Postgres", "Alerts")),
    ("How often is Redis backed up?", "runbook", ("Redis", "Backup")),
    ("How do I restore Redis from a snapshot?", "runbook", ("Redis", "Restore")),
    ("What Redis alerts page the on-call?", "runbook", ("Redis", "Alerts")),
    ("How is Kafka data backed up?", "runbook", ("Kafka", "Backup")),
    ("How do we recover a lost Kafka cluster?", "runbook", ("Kafka", "Restore")),
    ("Which Kafka conditions page someone?", "runbook", ("Kafka", "Alerts")),
]


def markdown(title: str, sections: dict[tuple[str, str], str]) -> str:
    out, parent = [f"# {title}", ""], None
    for (top, sub), body in sections.items():
        if top != parent:
            out += [f"## {top}", ""]
            parent = top
        out += [f"### {sub}", "", body, ""]
    return "\n".join(out).strip() + "\n"


def main() -> None:
    here = Path(__file__).parent
    lines = [
        json.dumps({"name": n, "description": d, "text": markdown(d, secs)}, ensure_ascii=False)
        for n, (d, secs) in DOCS.items()
    ]
    (here / "docs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for _, doc, path in QUESTIONS:
        assert path in DOCS[doc][1], (doc, path)
    lines = [
        json.dumps({"query": q, "doc": d, "section": [DOCS[d][0], *p]}, ensure_ascii=False) for q, d, p in QUESTIONS
    ]
    (here / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()

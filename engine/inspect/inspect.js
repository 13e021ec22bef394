
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  let shown = 0;
  let busy = false;

  // el("li", {class: "item", "data-key": k}, child, "text", ...): text always goes in as text nodes
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      node.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return node;
  }

  function num(x) { return (x === null || x === undefined) ? "" : Number(x).toFixed(2); }

  function bar(score, label) {
    if (score === null || score === undefined) return el("span", {class: "meta"}, "no score (session item)");
    const v = Math.max(0, Math.min(1, Number(score)));
    return el("span", {class: "score"},
      el("meter", {min: "0", max: "1", value: String(v), "aria-label": label + " " + num(score)}),
      el("span", {class: "num"}, num(score)));
  }

  function badge(mode) { return el("span", {class: "badge " + mode}, mode); }

  async function call(path, body) {
    const init = body === undefined ? {} : {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
    const response = await fetch(path, init);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) throw new Error((data && data.error) || ("HTTP " + response.status));
    return data;
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = !message;
  }

  function itemLi(it) {
    const li = el("li", {class: "item", "data-key": it.key, "data-mode": it.mode,
                         "data-score": it.score === null ? null : num(it.score)},
      badge(it.mode), el("span", {class: "name"}, it.label || it.key), " ");
    if (it.mode !== "always" && it.mode !== "manual") li.append(bar(it.score, "score"));
    if (it.priority !== null && it.priority !== undefined) {
      li.append(el("span", {class: "meta"}, "priority " + it.priority));
    }
    if (it.via && it.via !== "query") li.append(el("span", {class: "meta"}, "via " + it.via));
    if (it.pulled_by) li.append(el("span", {class: "meta"}, "pulled in by " + it.pulled_by));
    if (it.known === false) li.append(el("span", {class: "meta"}, "(no longer in the agent)"));
    if (it.description) li.append(el("p", {class: "desc"}, it.description));
    return li;
  }

  function stashLi(s) {
    const li = el("li", {class: "item", "data-key": s.key, "data-mode": "stash", "data-score": num(s.score)},
      badge("stash"), el("span", {class: "name"}, s.segment_id), " ", bar(s.score, "score"),
      el("span", {class: "meta"}, s.segment_type + ", " + s.tokens + " tokens, similarity " + num(s.similarity)));
    if (s.preview) li.append(el("p", {class: "desc quote"}, s.preview));
    return li;
  }

  function column(title, id, entries, render) {
    return el("section", {class: "column", id: "col-" + id, "aria-label": title},
      el("details", {open: "open"},
        el("summary", {}, el("h3", {}, title + " (" + entries.length + ")")),
        entries.length ? el("ul", {class: "items"}, ...entries.map(render))
                       : el("p", {class: "meta"}, "none")));
  }

  function table(caption, heads, rows, id) {
    return el("table", {id: id},
      el("caption", {}, caption),
      el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {scope: "col"}, h)))),
      el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))));
  }

  function prefixText(p) {
    const same = p.same_as_previous === null ? "first message: nothing to compare with"
      : p.same_as_previous ? "byte-identical to the previous message's" : "changed since the previous message";
    return same + " (" + p.tools + " tools, " + p.bytes + " bytes, sha256 " + p.sha256.slice(0, 12) + ")";
  }

  function render(r, title) {
    const body = $("result-body");
    body.replaceChildren();
    $("result-title").textContent = title;
    body.append(el("p", {id: "summary"}, r.summary));
    body.append(el("p", {class: "meta"}, "Message: ", el("span", {class: "quote", id: "shown-message"}, r.message)));
    body.append(el("p", {class: "meta"}, "Selected in " + r.ms + " ms from " + r.query_chunks.length +
      " query sentence" + (r.query_chunks.length === 1 ? "" : "s") + "; " +
      r.cut.map((c) => c.domain + ": top-K " + c.top_k + ", top-N " + c.top_n + ", include score " +
        c.include_score).join("; ")));
    if (r.recorded) {
      const c = r.recorded;
      const text = c.same_items ? "Recorded in the session file; replayed now with the same items."
        : "Recorded in the session file; a replay now differs: only recorded " +
          (c.only_recorded.join(", ") || "none") + "; only in the replay " + (c.only_replay.join(", ") || "none") + ".";
      body.append(el("p", {id: "recorded"}, text + (c.notes.length ? " " + c.notes.join("; ") : "")));
    }
    const cols = el("div", {class: "columns", id: "columns"},
      column("Rules", "rules", r.columns.rules, itemLi),
      column("References", "references", r.columns.references, itemLi),
      column("Tools", "tools", r.columns.tools, itemLi));
    if (r.stashed.length) cols.append(column("Stashed", "stashed", r.stashed, stashLi));
    body.append(cols);

    body.append(el("h3", {}, "Near misses"));
    if (r.near_misses.length) {
      body.append(table("The best items below the cut, and why they are not in (explain)",
        ["Item", "Type", "Similarity", "Rank", "Why not"],
        r.near_misses.map((n) => [
          el("span", {class: "near", "data-key": n.key}, n.label),
          n.type, bar(n.similarity, "similarity"),
          String(n.rank) + " in " + n.domain + " (ranking score " + num(n.score) + ")",
          el("ul", {}, ...n.reasons.map((x) => el("li", {}, x)))]), "near-misses"));
    } else body.append(el("p", {class: "meta"}, "none: the search left nothing out"));

    if (r.dropped.length || r.notes.length) {
      body.append(el("h3", {}, "Dropped and notes"));
      body.append(el("ul", {}, ...r.dropped.map((d) => el("li", {}, "Dropped " + (d.key || d.segment_id) +
        " (" + d.tokens + " tokens): " + d.reason)), ...r.notes.map((n) => el("li", {}, "Note: " + n))));
    }

    body.append(el("h3", {}, "Tool offer and prompt-cache prefix"));
    const o = r.offer;
    body.append(el("dl", {class: "facts", id: "offer"},
      el("dt", {}, "Offer mode"), el("dd", {}, o.mode + (o.mode === "stable" ? " (budget " + o.budget + ")" : "")),
      el("dt", {}, "Tools offered"), el("dd", {}, o.offered.length + ": " + (o.offered.join(", ") || "none")),
      el("dt", {}, "Deferred offer"), el("dd", {}, o.deferred.declared + " tools declared, " + o.deferred.deferred +
        " deferred; loaded now: " + (o.deferred.loaded.join(", ") || "none")),
      el("dt", {}, "Deferred prefix (tools + system)"),
      el("dd", {id: "prefix-deferred"}, prefixText(r.prefix.deferred)),
      el("dt", {}, "Offer prefix (" + o.mode + " tools + system)"),
      el("dd", {id: "prefix-selected"}, prefixText(r.prefix.selected))));

    if (r.stash) {
      body.append(el("h3", {}, "Stash hits"));
      if (r.stash.error) body.append(el("p", {class: "error"}, r.stash.error));
      else if (!r.stash.hits.length) body.append(el("p", {class: "meta"}, "no stashed segment matches"));
      else body.append(table(
        "The stash's best segments for the message (all sessions; this session: " + r.stash.session + ")",
        ["Segment", "Session", "Type", "Score", "Similarity", "In this request", "Text"],
        r.stash.hits.map((h) => [h.segment_id, h.session, h.type, bar(h.score, "score"), num(h.similarity),
          h.in_request ? "yes" : "no", el("span", {class: "quote"}, h.preview)]), "stash-hits"));
    }
    $("result").hidden = false;
    shown += 1;
    document.body.dataset.shown = String(shown);
  }

  async function load() {
    try {
      const info = await call("/api/info");
      $("agent").textContent = info.agent;
      const c = info.counts;
      let about = c.rules + " rules, " + c.references + " references, " + c.tools + " tools; tool offer: " +
        info.offer.mode;
      if (info.session_file) about += "; session file: " + info.session_file;
      if (info.stash) about += "; stash: " + info.stash.store + " (session " + info.stash.session + ")";
      $("about").textContent = about;
      $("message").maxLength = info.limits.max_message_chars;
      if (info.session_file) {
        const data = await call("/api/turns");
        const list = $("turns");
        list.replaceChildren(...data.turns.map((t) => {
          const b = el("button", {type: "button", "data-turn": t.turn}, "Turn " + t.turn + ": " +
            (t.message.length > 80 ? t.message.slice(0, 80) + "..." : t.message));
          b.addEventListener("click", () => {
            for (const other of list.querySelectorAll("button")) other.removeAttribute("aria-current");
            b.setAttribute("aria-current", "true");
            if (t.error) { showError("turn " + t.turn + ": " + t.error); return; }
            showError("");
            render(t, "Turn " + t.turn + " of the saved session");
            $("result-title").focus();
          });
          return el("li", {}, b);
        }));
        $("turns-nav").hidden = !data.turns.length;
      }
      document.body.dataset.state = "ready";
    } catch (e) {
      showError(e.message);
      document.body.dataset.state = "error";
    }
  }

  async function submit(event) {
    if (event) event.preventDefault();
    const text = $("message").value;
    if (!text.trim()) { showError("type a message first"); $("message").focus(); return; }
    if (busy) return;
    busy = true;
    document.body.dataset.state = "busy";
    $("submit").setAttribute("aria-disabled", "true");
    $("result").setAttribute("aria-busy", "true");
    try {
      const r = await call("/api/select", {message: text});
      showError("");
      render(r, "Request context for your message");
      document.body.dataset.state = "ready";
    } catch (e) {
      showError(e.message);
      document.body.dataset.state = "error";
    } finally {
      busy = false;
      $("submit").removeAttribute("aria-disabled");
      $("result").setAttribute("aria-busy", "false");
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("ask").addEventListener("submit", submit);
    $("message").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        $("ask").requestSubmit();
      }
    });
    $("reset").addEventListener("click", async () => {
      try {
        await call("/api/reset", {});
        showError("");
        $("result").hidden = true;
        $("message").focus();
      } catch (e) { showError(e.message); }
    });
    load();
  });
})();

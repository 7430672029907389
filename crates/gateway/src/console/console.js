// The console's one script (a module, served from the binary; the pages work without it).
// On the first page of the requests, "Live" reads the page again every two seconds and puts
// its new table in place of the old: the rows are the server's, rendered and escaped there,
// taken from a parsed document (whose scripts never run) and never built from strings here.
const table = document.querySelector("[data-live]");
if (table) {
  const status = document.createElement("p");
  status.setAttribute("role", "status");
  status.className = "help";
  const label = document.createElement("label");
  const box = document.createElement("input");
  box.type = "checkbox";
  box.id = "live";
  label.htmlFor = "live";
  label.textContent = " Live: new requests as they are recorded";
  const line = document.createElement("p");
  line.append(box, label);
  table.before(line, status);
  let timer = null;
  let shown = table;
  const ids = (node) =>
    new Set(Array.from(node.querySelectorAll("tbody tr")).map((row) => row.dataset.id));
  async function refresh() {
    try {
      const answer = await fetch(window.location.href, { credentials: "same-origin" });
      if (!answer.ok) {
        status.textContent = `Not updated: the console answered ${answer.status}.`;
        return;
      }
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const next = page.querySelector("[data-live]");
      if (!next) return;
      const before = ids(shown);
      const added = Array.from(ids(next)).filter((id) => !before.has(id)).length;
      const fresh = document.importNode(next, true);
      shown.replaceWith(fresh);
      shown = fresh;
      status.textContent = added
        ? `${added} new request${added === 1 ? "" : "s"}, ${new Date().toLocaleTimeString()}`
        : status.textContent;
    } catch (e) {
      status.textContent = `Not updated: ${e}`;
    }
  }
  box.addEventListener("change", () => {
    if (box.checked) {
      refresh();
      timer = setInterval(refresh, 2000);
    } else {
      clearInterval(timer);
    }
  });
}

// The playground: the form's request sent through the gateway, its samples in columns as
// their events come (out of order), and the pick's decision once the answer's last chunk
// says it. Every text is set as text (textContent), never as markup.
const playground = document.querySelector("#playground");
if (playground) {
  const status = document.querySelector("#playground-status");
  const view = document.querySelector("#samples-view");
  const decision = document.querySelector("#decision");
  const make = (tag, className, text) => {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  };
  let columns = new Map();
  let sentAt = 0;
  function column(sample) {
    let c = columns.get(sample);
    if (c) return c;
    const section = make("section", "column");
    section.dataset.sample = String(sample);
    section.setAttribute("aria-label", `Sample ${sample}`);
    const head = make("h2", "", `Sample ${sample}`);
    const state = make("p", "meta", "streaming");
    const reasoning = make("pre", "text reasoning");
    reasoning.hidden = true;
    const text = make("pre", "text");
    const calls = make("div", "calls");
    section.append(head, state, reasoning, text, calls);
    c = { section, state, reasoning, text, calls, args: new Map(), events: 0 };
    columns.set(sample, c);
    // Columns in sample order, whichever speaks first.
    const after = Array.from(view.children).find((s) => Number(s.dataset.sample) > sample);
    view.insertBefore(section, after || null);
    return c;
  }
  function onSample(e) {
    const c = column(e.sample);
    c.events += 1;
    if (c.section.dataset.firstMs === undefined && ["content", "reasoning", "refusal", "call"].includes(e.kind)) {
      // When the gateway saw the sample's first token, and when this page showed it, both
      // counted from the request's start (the gateway's, and this page's sending it).
      c.section.dataset.firstMs = String(e.at_ms);
      c.section.dataset.shownMs = String(Math.round(performance.now() - sentAt));
    }
    if (e.kind === "content" || e.kind === "refusal") {
      c.text.append(e.text);
    } else if (e.kind === "reasoning") {
      c.reasoning.hidden = false;
      c.reasoning.append(e.text);
    } else if (e.kind === "call") {
      const call = make("div", "call");
      call.append(make("strong", "", `${e.name}(`));
      const args = make("pre", "text arguments");
      call.append(args, make("strong", "", ")"));
      c.calls.append(call);
      c.args.set(e.call, args);
    } else if (e.kind === "arguments") {
      const args = c.args.get(e.call);
      if (args) args.append(e.text);
    } else if (e.kind === "finished") {
      c.section.dataset.end = "finished";
      c.state.textContent = `finished: ${e.reason}, at ${e.at_ms} ms, ${c.events} events`;
    } else if (e.kind === "cancelled") {
      c.section.dataset.end = "cancelled";
      c.section.classList.add("cancelled");
      c.state.textContent = `cancelled (${e.reason}) at ${e.at_ms} ms, ${c.events} events`;
    } else if (e.kind === "error") {
      c.state.textContent = `failed: ${e.text}`;
    } else if (e.kind === "tokens") {
      c.section.dataset.tokens = String(e.tokens);
      c.state.append(`, ${e.tokens} tokens${e.source === "estimated" ? " (counted)" : ""}`);
    }
  }
  function onAnswer(chunk) {
    const summary = chunk && chunk.choicewise;
    if (!summary || !summary.selected) return;
    decision.replaceChildren();
    decision.append(make("h2", "", "The pick"));
    const said = [`${summary.decision || "all"}: sample ${summary.selected.join(", ")} answered`];
    if (summary.cancelled && summary.cancelled.length) said.push(`samples ${summary.cancelled.join(", ")} cancelled`);
    said.push(`${summary.started} started`);
    decision.append(make("p", "", said.join("; ") + "."));
    for (const s of summary.selected) {
      const c = column(s);
      c.section.classList.add("winner");
      c.section.dataset.winner = "true";
      c.section.querySelector("h2").append(make("span", "badge", " the answer"));
    }
    const vote = summary.vote;
    if (vote && vote.tally) {
      const list = make("ol", "tally");
      for (const row of vote.tally) {
        list.append(make("li", "", `${row.key === "" ? "(no key)" : row.key}: ${row.votes ?? row.weight} ${row.votes === 1 ? "vote" : "votes"}`));
      }
      decision.append(make("p", "", vote.decided ? "Decided:" : `Undecided: ${vote.reason || ""}`), list);
    }
  }
  playground.addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    const form = new FormData(playground);
    const asked = { model: form.get("model"), prompt: form.get("prompt") };
    const samples = form.get("samples");
    if (samples) asked.samples = Number(samples);
    if (form.get("select")) asked.select = form.get("select");
    if (form.get("key")) asked.key = form.get("key");
    columns = new Map();
    view.replaceChildren();
    decision.replaceChildren();
    status.textContent = "Sending…";
    sentAt = performance.now();
    let answer;
    try {
      answer = await fetch("/console/playground", {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(asked),
      });
    } catch (e) {
      status.textContent = `Not sent: ${e}`;
      return;
    }
    if (!answer.ok || !answer.body) {
      status.textContent = `The console answered ${answer.status}.`;
      return;
    }
    status.textContent = "Streaming…";
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += value;
      let at;
      while ((at = pending.indexOf("\n\n")) >= 0) {
        const block = pending.slice(0, at);
        pending = pending.slice(at + 2);
        let name = "message";
        let data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) name = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        const parsed = data ? JSON.parse(data) : null;
        if (name === "sample") onSample(parsed);
        else if (name === "answer") onAnswer(parsed);
        else if (name === "error") {
          const message = parsed.body && parsed.body.error ? parsed.body.error.message : JSON.stringify(parsed.body);
          status.textContent = `Refused (${parsed.status}): ${message}`;
        } else if (name === "end") status.textContent = "Done.";
      }
    }
  });
}

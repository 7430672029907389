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

"""The style sheet and script of the Slack fake's page, inlined so the page is one response.

The script does two things: it refreshes the page when the fake's state changes (polling the
small `/_fake/revision`), keeping threads a person collapsed collapsed, and it sends a
button's form with `fetch` so the page can say what the receiver answered. Without script
the forms still work (the fake redirects back to the message).
"""

CSS = """
:root { --fg: #1d1c1d; --muted: #616061; --line: #e2e2e2; --side: #3f0e40; --link: #1264a3; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 -apple-system, "Segoe UI", Roboto, Helvetica, Arial,
       sans-serif; color: var(--fg); background: #fff; }
.app { display: flex; min-height: 100vh; }
nav.sidebar { width: 230px; flex: none; background: var(--side); color: #e8dfe8;
              padding: 14px 0; }
nav.sidebar .brand { display: block; color: #fff; font-weight: 700; padding: 0 16px 12px;
                     text-decoration: none; font-size: 16px; }
nav.sidebar ul { list-style: none; margin: 0; padding: 0; }
nav.sidebar li a { display: flex; justify-content: space-between; color: #e8dfe8;
                   padding: 3px 16px; text-decoration: none; }
nav.sidebar li a:hover { background: #350d36; }
nav.sidebar li a.current { background: #1164a3; color: #fff; }
nav.sidebar .count { opacity: .7; font-size: 13px; }
nav.sidebar .count.awaiting { opacity: 1; background: #e01e5a; color: #fff;
                              border-radius: 9px; padding: 0 7px; }
nav.sidebar .you { padding: 14px 16px 0; font-size: 13px; opacity: .85; }
main { flex: 1; min-width: 0; padding: 0 24px 40px; }
main > h1 { font-size: 20px; margin: 0 -24px 0; padding: 14px 24px;
            border-bottom: 1px solid var(--line); position: sticky; top: 0; background: #fff;
            z-index: 1; }
.banner { margin: 12px 0; padding: 8px 12px; border-radius: 6px; background: #f4ede4;
          font-size: 14px; }
.banner.on { background: #e8f5fa; }
.empty { color: var(--muted); margin: 24px 0; }
table.channels { border-collapse: collapse; margin: 12px 0; }
table.channels th, table.channels td { text-align: left; padding: 6px 16px 6px 0;
                                       border-bottom: 1px solid var(--line); }
article.msg { padding: 8px 10px; margin: 4px 0; border-radius: 6px; }
article.msg:hover { background: #f8f8f8; }
article.msg:target { background: #fdf6d8; }
article.msg > header { font-size: 14px; }
.who { font-weight: 700; }
.app-badge { font-size: 10px; background: #e8e8e8; color: var(--muted); padding: 0 4px;
             border-radius: 3px; margin-left: 4px; vertical-align: 1px; }
time, .edited { color: var(--muted); font-size: 12px; margin-left: 6px; }
article.ephemeral { background: #f2f7fb; border: 1px dashed #a3c4dc; }
.ephemeral-note { color: #1264a3; font-size: 12px; margin-left: 6px; }
.b-header { font-size: 17px; font-weight: 700; margin: 4px 0; }
.b-section, .b-context, .b-text { margin: 4px 0; }
.fields { display: grid; grid-template-columns: 1fr 1fr; gap: 4px 24px; margin-top: 4px; }
.b-context { color: var(--muted); font-size: 13px; display: flex; flex-wrap: wrap;
             gap: 4px 12px; }
hr { border: 0; border-top: 1px solid var(--line); margin: 8px 0; }
pre { background: #f8f8f8; border: 1px solid var(--line); border-radius: 4px; padding: 8px;
      white-space: pre-wrap; word-break: break-word; font-size: 13px; margin: 4px 0; }
code { background: #f3f3f3; border: 1px solid var(--line); border-radius: 3px;
       padding: 0 3px; color: #c01343; font-size: 13px; }
a { color: var(--link); }
.mention { background: #e8f5fa; color: var(--link); border-radius: 3px; padding: 0 2px; }
form.actions { display: flex; gap: 8px; align-items: center; margin: 8px 0 2px;
               flex-wrap: wrap; }
.btn { font: inherit; font-size: 14px; font-weight: 700; padding: 4px 14px; border-radius: 4px;
       border: 1px solid #bbb; background: #fff; color: var(--fg); cursor: pointer;
       text-decoration: none; }
.btn.primary { background: #007a5a; border-color: #007a5a; color: #fff; }
.btn.danger { background: #fff; border-color: #e01e5a; color: #e01e5a; }
.btn:disabled { opacity: .45; cursor: not-allowed; }
.click-status { font-size: 13px; color: var(--muted); }
.disabled-note { font-size: 13px; color: #8a5a00; }
ul.clicks { list-style: none; padding: 0; margin: 4px 0; font-size: 13px; color: var(--muted); }
ul.clicks .bad { color: #b00020; }
ul.files { list-style: none; padding: 0; margin: 4px 0; }
ul.files li { border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px;
              margin: 4px 0; }
.attachment { border-left: 4px solid var(--bar, #ddd); padding-left: 10px; margin: 6px 0; }
details.thread { margin: 0 0 8px 30px; border-left: 3px solid var(--line);
                 padding-left: 10px; }
details.thread > summary { color: var(--link); font-size: 13px; font-weight: 700;
                           cursor: pointer; }
.unknown { color: var(--muted); font-size: 12px; font-style: italic; }
"""

JS = """
(() => {
  let revision = document.body.dataset.revision;
  async function refresh() {
    try {
      const answer = await fetch("/_fake/revision", {cache: "no-store"});
      const now = String((await answer.json()).revision);
      if (now === revision) return;
      const page = await fetch(location.pathname, {cache: "no-store"});
      const fresh = new DOMParser().parseFromString(await page.text(), "text/html");
      const collapsed = [...document.querySelectorAll("details[data-id]:not([open])")]
        .map(d => d.dataset.id);
      document.getElementById("content").replaceWith(fresh.getElementById("content"));
      for (const id of collapsed) {
        const d = document.querySelector(`details[data-id="${CSS.escape(id)}"]`);
        if (d) d.open = false;
      }
      revision = fresh.body.dataset.revision;
    } catch (e) {
      // The fake is restarting or gone: keep showing the last page.
    }
  }
  setInterval(refresh, 1000);
  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!form.matches("form.actions")) return;
    event.preventDefault();
    const button = event.submitter;
    if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    const status = form.querySelector(".click-status");
    status.textContent = "sending…";
    try {
      const answer = await fetch(form.action, {
        method: "POST", body: new URLSearchParams(new FormData(form, button)),
        headers: {Accept: "application/json"}});
      status.textContent = (await answer.json()).summary;
    } catch (e) {
      status.textContent = "the Slack fake did not answer: " + e;
    }
    refresh();
  });
})();
"""

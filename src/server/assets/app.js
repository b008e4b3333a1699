// The workjournal dashboard (SPEC 12.2): plain script, no build step, no
// network but this server. Reads /ui/overview every 1.5 s and /ui/items on
// demand; every write is one POST /ui/action, refused in read-only mode.
"use strict";
(function () {
  var readOnly = document.body.getAttribute("data-read-only") === "true";
  var state = "pending", offsets = [0], nextOffset = null, searchText = "";
  var $ = function (sel) { return document.querySelector(sel); };

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function showError(msg) {
    var e = $("#error");
    if (msg) { e.textContent = String(msg).split("\n")[0]; e.hidden = false; } else { e.hidden = true; e.textContent = ""; }
  }
  function notice(msg) {
    var n = $("#notice"); n.textContent = msg; n.hidden = !msg;
    if (msg) { setTimeout(function () { if (n.textContent === msg) { n.hidden = true; } }, 6000); }
  }
  function call(method, url, body) {
    var opts = { method: method, headers: {}, credentials: "same-origin" };
    if (body !== undefined) { opts.headers["content-type"] = "application/json"; opts.body = JSON.stringify(body); }
    return fetch(url, opts).then(function (r) {
      return r.text().then(function (t) {
        var v = null;
        try { v = t ? JSON.parse(t) : null; } catch (e) { v = null; }
        if (!r.ok) {
          var m = v && v.error ? v.error.message : (r.status + " " + r.statusText);
          throw new Error(m);
        }
        return v;
      });
    });
  }
  function ago(ms, now) {
    if (ms === null || ms === undefined) { return ""; }
    var s = Math.round((now - ms) / 1000), neg = s < 0; s = Math.abs(s);
    var t = s < 90 ? s + " s" : s < 5400 ? Math.round(s / 60) + " min" : s < 129600 ? Math.round(s / 3600) + " h" : Math.round(s / 86400) + " d";
    return neg ? "in " + t : t + " ago";
  }
  function when(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }

  // ---- overview: counts, charts, flows ----------------------------------
  function setCount(name, n) { var c = $("#count-" + name + " b"); if (c) { c.textContent = String(n); } }
  function chart(svg, series, label) {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var max = 0;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) { max = v; } }); });
    var ns = "http://www.w3.org/2000/svg";
    series.forEach(function (s) {
      var n = s.values.length; if (n < 2) { return; }
      var p = document.createElementNS(ns, "polyline");
      p.setAttribute("class", s.cls);
      p.setAttribute("points", s.values.map(function (v, i) { return (i * 600 / (n - 1)).toFixed(1) + "," + (118 - (v / (max || 1)) * 108).toFixed(1); }).join(" "));
      svg.appendChild(p);
    });
    var t = document.createElementNS(ns, "text");
    t.setAttribute("x", "4"); t.setAttribute("y", "11");
    t.textContent = "max " + (Math.round(max * 100) / 100) + label;
    svg.appendChild(t);
  }
  function drawCharts(h) {
    var added = [], acked = [], failed = [], backlog = [];
    for (var i = 0; i < h.length; i++) {
      backlog.push(h[i][1]);
      if (i === 0) { continue; }
      var dt = Math.max(1, h[i][0] - h[i - 1][0]) / 1000;
      added.push(Math.max(0, h[i][5] - h[i - 1][5]) / dt);
      acked.push(Math.max(0, h[i][6] - h[i - 1][6]) / dt);
      failed.push(Math.max(0, h[i][7] - h[i - 1][7]) / dt);
    }
    chart($("#chart-rate"), [{ cls: "added", values: added }, { cls: "acked", values: acked }, { cls: "failed", values: failed }], " /s");
    chart($("#chart-backlog"), [{ cls: "backlog", values: backlog }], " items");
  }
  // SPEC 12.2: the flow table's controls, and a flow's limits in one line.
  var actionLabels = { back_off: "back off 30s", lift: "lift back-off" };
  var nowMs = 0;
  function limitsText(l, now) {
    if (!l) { return ""; }
    var parts = [];
    if (l.rate) { parts.push("rate " + l.rate.permits + " per " + (l.rate.period_ms / 1000) + " s (" + l.permits_used + " used)"); }
    if (l.concurrency !== null && l.concurrency !== undefined) { parts.push("cap " + l.concurrency + " (" + l.pending + " pending)"); }
    if (l.backoff_until_ms !== null && l.backoff_until_ms !== undefined && l.backoff_until_ms > now) { parts.push("backed off " + Math.ceil((l.backoff_until_ms - now) / 1000) + " s more"); }
    parts.push(l.held + " held" + (l.blocked ? ", holding now" : ""));
    return parts.join(" · ");
  }
  function flowRow(f) {
    var tr = el("tr", { "data-flow": f.flow });
    tr.appendChild(el("td", {}, f.flow === "" ? "(default)" : f.flow));
    tr.appendChild(el("td", { "class": "flow-state" }, f.state));
    tr.appendChild(el("td", { "class": "num" }, f.backlog));
    tr.appendChild(el("td", { "class": "num" }, f.parked));
    tr.appendChild(el("td", { "class": "flow-limits" }, limitsText(f.limits, nowMs)));
    var td = el("td");
    if (!readOnly) {
      (f.actions || []).forEach(function (a) {
        var b = el("button", { "data-action": a, "data-flow": f.flow }, actionLabels[a] || a);
        b.addEventListener("click", function () { act({ action: a, flow: f.flow }); });
        td.appendChild(b); td.appendChild(document.createTextNode(" "));
      });
    }
    tr.appendChild(td);
    return tr;
  }
  function scheduleRow(s) {
    var tr = el("tr", { "data-schedule": s.name });
    tr.appendChild(el("td", {}, s.name));
    tr.appendChild(el("td", {}, s.spec));
    tr.appendChild(el("td", {}, s.flow === "" ? "(default)" : s.flow));
    tr.appendChild(el("td", { "class": "schedule-state" }, s.state));
    tr.appendChild(el("td", {}, when(s.next_fire_ms)));
    tr.appendChild(el("td", {}, when(s.last_fired_ms)));
    tr.appendChild(el("td", { "class": "num" }, s.fired));
    tr.appendChild(el("td", { "class": "num" }, s.skipped));
    var td = el("td");
    if (!readOnly) {
      (s.actions || []).forEach(function (a) {
        var b = el("button", { "data-action": a, "data-schedule": s.name }, a === "pause_schedule" ? "pause" : "resume");
        b.addEventListener("click", function () { act({ action: a, schedule: s.name }); });
        td.appendChild(b);
      });
    }
    tr.appendChild(td);
    return tr;
  }
  function refresh() {
    return call("GET", "/ui/overview").then(function (o) {
      showError(null);
      var s = o.stats;
      setCount("backlog", s.backlog); setCount("due", s.due); setCount("pending", s.pending);
      setCount("delayed", s.delayed); setCount("parked", s.parked); setCount("dead_letters", s.dead_letters);
      setCount("oldest", s.oldest_pending_age_ms === null ? "–" : ago(o.now_ms - s.oldest_pending_age_ms, o.now_ms).replace(" ago", ""));
      $("#updated").textContent = "updated " + when(o.now_ms);
      drawCharts(o.history);
      nowMs = o.now_ms;
      var tb = $("#flows tbody");
      while (tb.firstChild) { tb.removeChild(tb.firstChild); }
      o.flows.forEach(function (f) { tb.appendChild(flowRow(f)); });
      // Say when the sample is cut off: past it, a flow's items are not counted.
      var cut = (s.backlog > o.flows_sample) ?
        " of " + s.backlog + " in the backlog: the counts stop there, and a flow whose items all come later is not listed." : ".";
      $("#flows-note").textContent = "Backlog per flow counts the next " + o.flows_sample + " items in claim order" + cut;
      var sb = $("#schedules tbody");
      if (sb) {
        while (sb.firstChild) { sb.removeChild(sb.firstChild); }
        (o.schedules || []).forEach(function (s) { sb.appendChild(scheduleRow(s)); });
        $("#schedules-note").textContent = (o.schedules || []).length ? "" : "No schedules (workjournal schedule add).";
      }
    }).catch(function (e) { showError(e.message); });
  }

  // ---- items --------------------------------------------------------------
  var columns = {
    pending: ["id", "flow", "payload", "claimed", "touched", "deliveries", "consumer", "actions"],
    delayed: ["id", "flow", "payload", "due", "deliveries", "actions"],
    dead_letter: ["select", "id", "flow", "payload", "reason", "failed", "deliveries", "actions"],
    backlog: ["id", "flow", "payload", "added", "deliveries", "actions"],
    due: ["id", "flow", "payload", "due", "deliveries", "actions"],
    parked: ["id", "flow", "payload", "added", "deliveries", "actions"],
    // SPEC 3, History: the finished items kept by their retention.
    completed: ["id", "flow", "payload", "result", "claimed", "finished", "deliveries"],
    cancelled: ["id", "flow", "payload", "claimed", "finished", "deliveries"]
  };
  // Each state's row buttons (SPEC 3: Cancelling, Updating, Timers,
  // Removing): a running item can only be cancelled; a dead letter has
  // finished.
  var rowActions = {
    pending: ["cancel"],
    delayed: ["cancel", "priority", "promote", "remove"],
    dead_letter: ["redrive", "remove"],
    backlog: ["cancel", "priority", "remove"],
    due: ["cancel", "priority", "remove"],
    parked: ["cancel", "priority", "remove"]
  };
  function payloadText(p) {
    var hex = $("#hex").checked || p.text === null;
    var t = hex ? p.hex : p.text;
    return t + (p.truncated ? " … (" + p.size + " bytes)" : "");
  }
  function cell(col, it, now) {
    switch (col) {
      case "select": {
        var td = el("td"); if (!readOnly) { td.appendChild(el("input", { type: "checkbox", "class": "pick", value: String(it.id), "aria-label": "select " + it.id })); } return td;
      }
      case "id": return el("td", { "class": "num" }, it.id);
      case "flow": {
        // SPEC 12.1: an item waiting in its flow's held lane (a flow limit).
        var fl = el("td", {}, it.flow);
        if (it.held) { fl.appendChild(document.createTextNode(" ")); fl.appendChild(el("span", { "class": "badge held", title: "held by its flow's limits" }, "held")); }
        // SPEC 3, Cancelling: a running item its worker is told to stop.
        if (it.cancelling) { fl.appendChild(document.createTextNode(" ")); fl.appendChild(el("span", { "class": "badge cancelling", title: "cancelled: its worker stops it" }, "cancelling")); }
        return fl;
      }
      case "payload": return el("td", { "class": "payload" }, payloadText(it.payload));
      case "claimed": return el("td", { title: when(it.claimed_at_ms) }, ago(it.claimed_at_ms, now));
      // The last heartbeat (SPEC 3, Looking); a claim never touched shows its claim.
      case "touched": return el("td", { title: when(it.last_touch_ms) }, ago(it.last_touch_ms, now));
      case "due": return el("td", { title: when(it.not_before_ms) }, when(it.not_before_ms) + " (" + ago(it.not_before_ms, now) + ")");
      case "added": return el("td", { title: when(it.enqueued_at_ms), "class": "opt" }, ago(it.enqueued_at_ms, now));
      case "failed": return el("td", { title: when(it.failed_at_ms) }, ago(it.failed_at_ms, now));
      case "reason": return el("td", {}, it.reason);
      case "finished": return el("td", { title: when(it.finished_at_ms) }, ago(it.finished_at_ms, now));
      case "result": return el("td", { "class": "payload" }, it.result ? payloadText(it.result) : "");
      case "deliveries": return el("td", { "class": "num opt" }, it.deliveries);
      case "consumer": return el("td", { "class": "opt" }, it.consumer || "");
      case "actions": {
        var a = el("td");
        if (!readOnly) {
          (rowActions[it.state] || []).forEach(function (name) {
            var b = el("button", { "data-action": name, "data-id": String(it.id) }, name);
            b.addEventListener("click", function () {
              if ((name === "cancel" || name === "remove") && !window.confirm(name + " item " + it.id + "?")) { return; }
              if (name === "priority") {
                // SPEC 3, Updating: a new tier, re-ranked where it waits.
                var tier = window.prompt("priority tier of item " + it.id + " (0-255, higher runs earlier)", String(it.priority || 0));
                if (tier === null) { return; }
                act({ action: name, ids: [it.id], priority: Number(tier) });
                return;
              }
              act({ action: name, ids: [it.id] });
            });
            a.appendChild(b);
          });
        }
        return a;
      }
    }
    return el("td");
  }
  function renderItems(page) {
    var cols = columns[state].filter(function (c) { return !(readOnly && (c === "select" || c === "actions")); });
    var head = $("#items thead"), body = $("#items tbody");
    while (head.firstChild) { head.removeChild(head.firstChild); }
    while (body.firstChild) { body.removeChild(body.firstChild); }
    var hr = el("tr");
    cols.forEach(function (c) {
      var cls = (c === "deliveries" || c === "consumer" || c === "added") ? "opt" : "";
      hr.appendChild(el("th", { "class": cls }, c === "select" || c === "actions" ? "" : c));
    });
    head.appendChild(hr);
    page.items.forEach(function (it) {
      var tr = el("tr", { "data-id": String(it.id), "data-state": it.state });
      cols.forEach(function (c) { tr.appendChild(cell(c, it, page.now_ms)); });
      body.appendChild(tr);
    });
    if (page.items.length === 0) {
      var td = el("td", { colspan: String(cols.length), "class": "muted" }, searchText ? "nothing found here" : "no items in this state");
      var tr = el("tr"); tr.appendChild(td); body.appendChild(tr);
    }
    nextOffset = page.next_offset;
    $("#next").disabled = nextOffset === null || nextOffset === undefined;
    $("#prev").disabled = offsets.length < 2;
    $("#page-info").textContent = "from #" + (offsets[offsets.length - 1] + 1) + (searchText ? " · matching " + JSON.stringify(searchText) : "");
    var dc = $("#dead-controls"); if (dc) { dc.hidden = state !== "dead_letter"; }
  }
  function loadItems() {
    var text = searchText;
    if (/^\s*\d+\s*$/.test(text)) {
      return call("GET", "/ui/find?id=" + encodeURIComponent(text.trim())).then(function (r) {
        if (r.item && r.item.state !== state) { selectTab(r.item.state, true); }
        renderItems({ items: r.item ? [r.item] : [], next_offset: null, now_ms: r.now_ms });
        if (!r.item) { notice("no item " + text.trim() + " in the queue"); }
      }).catch(function (e) { showError(e.message); });
    }
    var url = "/ui/items?state=" + state + "&offset=" + offsets[offsets.length - 1] + "&limit=50";
    if (text) { url += "&q=" + encodeURIComponent(text); }
    return call("GET", url).then(function (p) { showError(null); renderItems(p); })
      .catch(function (e) { showError(e.message); });
  }
  function selectTab(s, keepSearch) {
    state = s; offsets = [0];
    if (!keepSearch) { searchText = ""; $("#search-text").value = ""; }
    Array.prototype.forEach.call(document.querySelectorAll("#tabs button"), function (b) {
      b.className = b.getAttribute("data-state") === s ? "on" : "";
    });
  }

  // ---- actions --------------------------------------------------------------
  function showStepped(c) {
    var box = $("#stepped");
    while (box.firstChild) { box.removeChild(box.firstChild); }
    if (!c) { box.hidden = true; return; }
    box.appendChild(el("div", {}, "Item " + c.item.id + " of flow " + c.item.flow + " is pending under this page: " + payloadText(c.item.payload)));
    [["ack", "done (ack)"], ["release", "give back"]].forEach(function (pair) {
      var b = el("button", { "data-action": pair[0] }, pair[1]);
      b.addEventListener("click", function () { act({ action: pair[0], receipt: c.receipt }).then(function () { showStepped(null); }); });
      box.appendChild(b); box.appendChild(document.createTextNode(" "));
    });
    box.hidden = false;
  }
  function act(body) {
    if (readOnly) { showError("this dashboard is read-only"); return Promise.resolve(); }
    if ((body.action === "purge" || body.action === "redrive_all") && !window.confirm(body.action === "purge" ? "Delete every dead letter for good?" : "Redrive every dead letter?")) {
      return Promise.resolve();
    }
    return call("POST", "/ui/action", body).then(function (r) {
      showError(null); notice(r.message);
      if (body.action === "step") { showStepped(r.stepped); }
      return Promise.all([refresh(), loadItems()]);
    }).catch(function (e) { showError(e.message); });
  }

  // ---- wiring ---------------------------------------------------------------
  Array.prototype.forEach.call(document.querySelectorAll("#tabs button"), function (b) {
    b.addEventListener("click", function () { selectTab(b.getAttribute("data-state"), false); loadItems(); });
  });
  $("#search").addEventListener("submit", function (e) { e.preventDefault(); searchText = $("#search-text").value; offsets = [0]; loadItems(); });
  $("#hex").addEventListener("change", loadItems);
  $("#next").addEventListener("click", function () { if (nextOffset !== null) { offsets.push(nextOffset); loadItems(); } });
  $("#prev").addEventListener("click", function () { if (offsets.length > 1) { offsets.pop(); loadItems(); } });
  var pause = $("#pause-form");
  if (pause) {
    pause.addEventListener("submit", function (e) {
      e.preventDefault();
      var f = $("#pause-flow").value.trim();
      if (f) { act({ action: "pause", flow: f }).then(function () { $("#pause-flow").value = ""; }); }
    });
  }
  var bind = function (sel, fn) { var b = $(sel); if (b) { b.addEventListener("click", fn); } };
  bind("#redrive-selected", function () {
    var ids = Array.prototype.map.call(document.querySelectorAll("#items input.pick:checked"), function (c) { return Number(c.value); });
    if (ids.length === 0) { showError("select dead letters first"); return; }
    act({ action: "redrive", ids: ids });
  });
  bind("#redrive-all", function () { act({ action: "redrive_all" }); });
  bind("#purge", function () { act({ action: "purge" }); });

  refresh(); loadItems();
  setInterval(refresh, 1500);
})();

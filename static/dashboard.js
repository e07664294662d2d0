// The dashboard (/tests), on top of a page that works without it: a panel folded or opened
// stays so (localStorage "shoal_folds"; a panel opened is refreshed at once); ticking an
// active-run filter hides the rows at once and keeps the choice in the cookie the server
// reads (active_run_filters); the workers table is searched as you type.
(function () {
  "use strict";
  var KEY = "shoal_folds";
  function folds() {
    try {
      return JSON.parse(window.localStorage.getItem(KEY)) || {};
    } catch (e) {
      return {};
    }
  }
  document.querySelectorAll("details[data-fold]").forEach(function (d) {
    var state = folds()[d.getAttribute("data-fold")];
    if (state === "closed" || state === "open") {
      d.open = state === "open";
    }
  });
  // toggle does not bubble: listen while it goes down.
  document.addEventListener("toggle", function (e) {
    var d = e.target;
    if (!(d instanceof HTMLDetailsElement) || !d.hasAttribute("data-fold")) {
      return;
    }
    var f = folds();
    f[d.getAttribute("data-fold")] = d.open ? "open" : "closed";
    try {
      window.localStorage.setItem(KEY, JSON.stringify(f));
    } catch (err) {}
    if (d.open && window.shoalRefresh) {
      d.querySelectorAll("[data-refresh]").forEach(window.shoalRefresh);
    }
  }, true);

  var dash = document.getElementById("dashboard");
  document.addEventListener("change", function (e) {
    var form = e.target.closest && e.target.closest("#active-filters form");
    if (!dash || !form) {
      return;
    }
    var on = [];
    var off = 0;
    form.querySelectorAll("input[type=checkbox][data-dimension]").forEach(function (c) {
      dash.classList.toggle("no-" + c.name, !c.checked);
      if (c.checked) {
        on.push(c.name);
      } else {
        off += 1;
      }
    });
    var value = off === 0 ? "; max-age=0" : (on.length ? on.join(",") : "none") + "; max-age=34560000";
    document.cookie = "active_run_filters=" + value + "; path=/; SameSite=Lax";
    var rows = document.querySelectorAll("#active tbody tr[data-test-type]");
    var shown = 0;
    rows.forEach(function (r) {
      if (window.getComputedStyle(r).display !== "none") {
        shown += 1;
      }
    });
    var h = document.querySelector("#active > summary h2");
    if (h) {
      h.textContent = "Active - " + rows.length + (off ? " (" + shown + ")" : "") + " tests";
    }
    var s = document.querySelector("#active-filters > summary");
    if (s) {
      s.textContent = "Filter the active runs" + (off ? ": " + shown + " of " + rows.length + " shown" : "");
    }
  });

  var input = document.querySelector("#workers-body input[name=workers_q]");
  var table = document.getElementById("workers-table");
  if (input && table && window.shoalRefresh) {
    var timer = 0;
    input.addEventListener("input", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(function () {
        var q = input.value.trim();
        table.setAttribute("data-refresh", "/tests?live=workers" + (q ? "&workers_q=" + encodeURIComponent(q) : ""));
        table.removeAttribute("data-etag");
        window.shoalRefresh(table);
      }, 350);
    });
  }
})();

// Live refresh: every element with data-refresh="<url>" gets that URL's HTML fragment as its
// content every 10 s while the page is visible. The pages work without it. Requests say
// "HX-Request: true" (the server then answers with the fragment of a page URL); a 204 leaves
// the element alone and a 286 is the last update (the element stops refreshing).
// An element with data-etag sends it as If-None-Match and keeps the answer's ETag: a 304
// leaves it alone. An element inside a folded <details>, or holding the field someone types
// in, waits. After a swap, the new content's [data-keep] elements are replaced by the page's
// own ones (same id) and its <details> keep their open state (same id); the element then
// gets a "shoal:refreshed" event. The URL is the page's own state (the tasks table sends
// its page, sort and search), so a refresh sends only what is on screen.
// window.shoalRefresh(el) refreshes one element now.
(function () {
  "use strict";
  function swap(el, html) {
    var kept = {};
    el.querySelectorAll("[data-keep][id]").forEach(function (k) {
      kept[k.id] = k;
    });
    var open = {};
    el.querySelectorAll("details[id]").forEach(function (d) {
      open[d.id] = d.open;
    });
    el.innerHTML = html;
    Object.keys(kept).forEach(function (id) {
      var fresh = document.getElementById(id);
      if (fresh && fresh !== kept[id] && el.contains(fresh) && fresh.hasAttribute("data-keep")) {
        fresh.replaceWith(kept[id]);
      }
    });
    el.querySelectorAll("details[id]").forEach(function (d) {
      if (Object.prototype.hasOwnProperty.call(open, d.id)) {
        d.open = open[d.id];
      }
    });
    el.dispatchEvent(new CustomEvent("shoal:refreshed", { bubbles: true }));
  }
  function load(el) {
    var url = el.getAttribute("data-refresh");
    if (!url) {
      return;
    }
    var headers = { Accept: "text/html", "HX-Request": "true" };
    var etag = el.getAttribute("data-etag");
    if (etag) {
      headers["If-None-Match"] = etag;
    }
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (r) {
        if (r.status === 286) {
          el.removeAttribute("data-refresh");
        }
        if (!r.ok || r.status === 204 || r.redirected) {
          return null;
        }
        var tag = r.headers.get("ETag");
        return r.text().then(function (html) {
          return { html: html, tag: tag };
        });
      })
      .then(function (got) {
        if (got !== null) {
          swap(el, got.html);
          if (got.tag) {
            el.setAttribute("data-etag", got.tag);
          }
        }
      })
      .catch(function () {});
  }
  function typing(el) {
    var a = document.activeElement;
    return a && a !== el && el.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName);
  }
  function refresh() {
    if (document.hidden) {
      return;
    }
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      if (!el.closest("details:not([open])") && !typing(el)) {
        load(el);
      }
    });
  }
  // The task a link names (?show_task=N highlights it; #task-N is its row) is scrolled to
  // the middle of the screen once the page has laid out (its charts loaded). Without
  // JavaScript a link with #task-N still lands on the row.
  function showTask() {
    var row = document.querySelector("tr.task-shown");
    if (!row && location.hash.indexOf("#task-") === 0) {
      row = document.getElementById(location.hash.slice(1));
    }
    if (row) {
      row.scrollIntoView({ block: "center" });
    }
  }
  if (/[?&]show_task=/.test(location.search) || location.hash.indexOf("#task-") === 0) {
    if (document.readyState === "complete") {
      showTask();
    } else {
      window.addEventListener("load", showTask);
    }
  }
  window.shoalRefresh = load;
  window.setInterval(refresh, 10000);
  // A tab coming back into view is brought up to date at once.
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
})();

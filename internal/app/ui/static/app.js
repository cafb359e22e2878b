// wasmjobs dashboard: the progressive parts. Every page works without this script.
"use strict";
(function () {
  // Times: the server writes UTC; show them in the browser's zone (UTC stays on hover).
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) {
        el.textContent = d.toLocaleString(undefined, {
          year: "numeric", month: "short", day: "numeric",
          hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
        });
      }
    });
  }
  // Live parts: poll the page itself and swap the elements marked data-live.
  var live = document.querySelectorAll("[data-live][id]");
  var busy = false;
  function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        live.forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh && fresh.innerHTML !== el.innerHTML) {
            el.innerHTML = fresh.innerHTML;
            localTimes(el);
          }
        });
      })
      .catch(function () { /* the next poll tries again */ })
      .finally(function () { busy = false; });
  }
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    if (live.length === 0) live = document.querySelectorAll("[data-live][id]");
    if (live.length > 0) setInterval(refresh, 2000);
  });
})();

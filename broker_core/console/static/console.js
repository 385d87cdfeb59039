// Charts: each element with data-chart="NAME" draws /api/chart/NAME with uPlot and fetches it
// again every refresh interval (the console samples the brokers' counters while you look).
(function () {
  var refreshMs = parseInt(document.body.dataset.refreshMs || "2000", 10);
  var colors = ["#2457a6", "#b3261e", "#e08a00", "#1e7d32", "#7b3fa0"];

  function draw(el, data) {
    var width = Math.max(320, el.clientWidth - 16);
    var series = [{}].concat(data.series.map(function (s, i) {
      var line = { label: s.label, stroke: colors[i % colors.length], width: 1.5 };
      if (data.stepped) {  // epochs (the Cluster page): they change only at an election
        line.paths = uPlot.paths.stepped({ align: 1 });
      }
      if (data.bars) {  // a histogram (the Timers page): one bar per bucket
        line.paths = uPlot.paths.bars({ size: [0.9, 60] });
        line.fill = colors[i % colors.length] + "99";
      }
      return line;
    }));
    var rows = [data.x].concat(data.series.map(function (s) { return s.values; }));
    if (el._plot && el._plot.series.length === series.length) {
      el._plot.setData(rows);
      return;
    }
    if (el._plot) el._plot.destroy();
    el._plot = new uPlot({ width: width, height: 180, series: series, axes: [{}, { label: data.unit || "per second" }] }, rows, el);
  }

  function refresh(el) {
    fetch("/api/chart/" + el.dataset.chart, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data && data.series) draw(el, data); })
      .catch(function () { /* the next refresh tries again */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      refresh(el);
      setInterval(function () { refresh(el); }, refreshMs);
    });
  });
})();

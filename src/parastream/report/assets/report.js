
(function () {
"use strict";
var root = document.documentElement;
var failed = false;
function fail(msg) {
  failed = true;
  root.setAttribute("data-parastream", "error: " + msg);
  var box = document.getElementById("ps-error");
  if (box) { box.hidden = false; box.textContent = "Chart script error: " + msg; }
}
window.addEventListener("error", function (ev) {
  fail((ev && (ev.message || (ev.error && ev.error.message))) || "unknown error");
});
window.addEventListener("unhandledrejection", function (ev) {
  fail("unhandled rejection: " + (ev && ev.reason && ev.reason.message || ev.reason));
});

var KIND_COLORS = ["#4e79a7", "#f28e2b", "#e3b23c", "#b07aa1"];
var ROLE_COLORS = {main: "#4e79a7", side: "#59a14f", comm: "#b07aa1"};
var OTHER_COLOR = "#8c959f";
var VERDICT_COLORS = {"true": "#2e9d4f", "partial": "#c98a00", "false": "#d64545",
                      "envelope-only": "#a0459b"};
var BARRIER_COLOR = "#cf222e";
var DARK_TEXT = {"#e3b23c": 1, "#f28e2b": 1};
var FONT = '11px -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Arial,sans-serif';
var FONT_B = '600 12px -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Arial,sans-serif';

function fmtUs(x) {
  if (x === null || x === undefined || !isFinite(x)) return "\u2013";
  var a = Math.abs(x);
  if (a >= 1e6) return (x / 1e6).toFixed(6).replace(/0{1,3}$/, "") + " s";
  if (a >= 1e3) return (x / 1e3).toFixed(6).replace(/0{1,3}$/, "") + " ms";
  return x.toFixed(3) + " us";
}
function fmtTick(x, step) {
  var unit = 1, suf = " us";
  if (step >= 1e5) { unit = 1e6; suf = " s"; } else if (step >= 100) { unit = 1e3; suf = " ms"; }
  var s = step / unit;
  var dec = Math.max(0, Math.min(6, Math.ceil(-Math.log10(s) - 1e-9)));
  return (x / unit).toFixed(dec) + suf;
}
function niceStep(span, n) {
  var raw = span / Math.max(1, n);
  var mag = Math.pow(10, Math.floor(Math.log10(raw)));
  var r = raw / mag;
  return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}
function hashHue(str) {
  var h = 2166136261;
  for (var i = 0; i < str.length; i++) { h ^= str.charCodeAt(i); h = Math.imul(h, 16777619); }
  return (h >>> 0) % 360;
}
function lowerBound(idx, key, value) {
  // first position p in idx with key[idx[p]] >= value (idx sorted by key)
  var lo = 0, hi = idx.length;
  while (lo < hi) { var mid = (lo + hi) >> 1; if (key[idx[mid]] < value) lo = mid + 1; else hi = mid; }
  return lo;
}
function el(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function clamp(x, a, b) { return x < a ? a : x > b ? b : x; }

function Gantt(box, data) {
  this.box = box; this.d = data;
  this.canvas = box.querySelector("canvas.chart");
  this.ctx = this.canvas.getContext("2d");
  this.mini = box.querySelector("canvas.minimap");
  this.mctx = this.mini.getContext("2d");
  this.tip = box.querySelector(".tip");
  this.rangeOut = box.querySelector('[data-out="range"]');
  this.legendOut = box.querySelector('[data-out="legend"]');
  this.labelW = 150; this.axisH = 22; this.markH = 18; this.laneH = 24; this.padB = 4;
  this.lanesTop = this.axisH + this.markH;
  this.extent = data.extent > 0 ? data.extent : 1;
  this.minSpan = Math.min(this.extent, 0.01);
  this.view = [0, this.extent];
  this.colorBy = "kind"; this.showWaits = true; this.showWindows = true;
  this.hover = null; this.drag = null; this.sel = null; this.pending = false;
  this.focus = -1; this.miniImg = null;
  var L = data.lanes.length, k, i;
  this.laneOps = []; this.laneMax = []; this.laneWaits = []; this.laneWaitMax = [];
  for (k = 0; k < L; k++) { this.laneOps.push([]); this.laneMax.push(0); this.laneWaits.push([]); this.laneWaitMax.push(0); }
  var ops = data.ops, w = data.waits;
  for (i = 0; i < ops.s.length; i++) {
    k = ops.lane[i];
    if (k >= 0 && k < L) { this.laneOps[k].push(i); if (ops.d[i] > this.laneMax[k]) this.laneMax[k] = ops.d[i]; }
  }
  for (i = 0; i < w.s.length; i++) {
    k = w.lane[i];
    if (k >= 0 && k < L) { this.laneWaits[k].push(i); if (w.d[i] > this.laneWaitMax[k]) this.laneWaitMax[k] = w.d[i]; }
  }
  this.nameColors = [];
  this.kindsPresent = {};
  for (i = 0; i < ops.k.length; i++) this.kindsPresent[ops.k[i]] = 1;
  this.bind();
  this.buildLegend();
  this.resize();
}

Gantt.prototype.X = function (t) { return this.labelW + (t - this.view[0]) * this.plotW / (this.view[1] - this.view[0]); };
Gantt.prototype.T = function (x) { return this.view[0] + (x - this.labelW) * (this.view[1] - this.view[0]) / this.plotW; };
Gantt.prototype.laneY = function (k) { return this.lanesTop + k * this.laneH; };

Gantt.prototype.resize = function () {
  var dpr = window.devicePixelRatio || 1;
  var W = Math.max(360, this.canvas.parentNode.clientWidth || 800);
  var H = this.lanesTop + Math.max(1, this.d.lanes.length) * this.laneH + this.padB;
  this.dpr = dpr; this.W = W; this.H = H; this.plotW = Math.max(50, W - this.labelW - 10);
  this.canvas.style.height = H + "px";
  this.canvas.width = Math.round(W * dpr); this.canvas.height = Math.round(H * dpr);
  var MW = Math.max(360, this.mini.clientWidth || W), MH = 46;
  this.MW = MW; this.MH = MH;
  this.mini.width = Math.round(MW * dpr); this.mini.height = Math.round(MH * dpr);
  this.miniImg = null;
  this.draw();
};

Gantt.prototype.request = function () {
  var self = this;
  if (this.pending) return;
  this.pending = true;
  var raf = window.requestAnimationFrame || function (f) { return setTimeout(f, 16); };
  raf(function () { self.pending = false; try { self.draw(); } catch (e) { fail(e.message || String(e)); } });
};

Gantt.prototype.setView = function (a, b) {
  var span = clamp(b - a, this.minSpan, this.extent);
  var mid = (a + b) / 2;
  a = mid - span / 2;
  if (a < 0) a = 0;
  if (a + span > this.extent) a = this.extent - span;
  this.view = [a, a + span];
  this.request();
};
Gantt.prototype.zoom = function (factor, anchor) {
  var v = this.view, span = v[1] - v[0];
  if (anchor === undefined) anchor = (v[0] + v[1]) / 2;
  var ns = clamp(span * factor, this.minSpan, this.extent);
  var a = anchor - (anchor - v[0]) * ns / span;
  this.setView(a, a + ns);
};
Gantt.prototype.pan = function (frac) {
  var v = this.view, dt = (v[1] - v[0]) * frac;
  this.setView(v[0] + dt, v[1] + dt);
};
Gantt.prototype.reset = function () { this.focus = -1; this.setView(0, this.extent); };
Gantt.prototype.pointRange = function (p) {
  var vals = [];
  if (p.side) vals.push(p.side[0], p.side[1]);
  if (p.dom && p.dom.w) vals.push(p.dom.w[0], p.dom.w[1]);
  if (p.barrier && p.barrier.t !== null) vals.push(p.barrier.t);
  if (!vals.length) return null;
  return [Math.min.apply(null, vals), Math.max.apply(null, vals)];
};
Gantt.prototype.zoomToPoint = function (i) {
  var p = this.d.points[i];
  if (!p) return;
  var r = this.pointRange(p);
  if (!r) return;
  var pad = Math.max(0.3 * (r[1] - r[0]), 0.5);
  this.focus = i;
  this.setView(r[0] - pad, r[1] + pad);
};

Gantt.prototype.opColor = function (i, lane) {
  var ops = this.d.ops;
  if (this.colorBy === "role") return ROLE_COLORS[this.d.lanes[lane].role] || OTHER_COLOR;
  if (this.colorBy === "name") {
    var n = ops.n[i], c = this.nameColors[n];
    if (!c) { c = "hsl(" + hashHue(this.d.names[n] || "") + ",52%,47%)"; this.nameColors[n] = c; }
    return c;
  }
  return KIND_COLORS[ops.k[i]] || OTHER_COLOR;
};
Gantt.prototype.waitPattern = function (c) {
  if (!this.pattern) {
    var off = document.createElement("canvas");
    off.width = 8; off.height = 8;
    var o = off.getContext("2d");
    o.fillStyle = "#eef0f2"; o.fillRect(0, 0, 8, 8);
    o.strokeStyle = "#8c959f"; o.lineWidth = 1.2;
    o.beginPath(); o.moveTo(-2, 10); o.lineTo(10, -2); o.moveTo(-2, 2); o.lineTo(2, -2);
    o.moveTo(6, 10); o.lineTo(10, 6); o.stroke();
    this.pattern = c.createPattern(off, "repeat");
  }
  return this.pattern;
};

// ---------------------------------------------------------------- drawing
Gantt.prototype.draw = function () {
  var c = this.ctx, d = this.d, L = d.lanes.length, W = this.W, H = this.H;
  c.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
  c.clearRect(0, 0, W, H);
  c.font = FONT; c.textBaseline = "middle";
  for (var k = 0; k < L; k++) {
    c.fillStyle = k % 2 ? "#f7f8fa" : "#ffffff";
    c.fillRect(this.labelW, this.laneY(k), W - this.labelW, this.laneH);
  }
  this.drawAxis(c);
  c.save();
  c.beginPath(); c.rect(this.labelW, this.axisH, this.plotW, H - this.axisH); c.clip();
  if (d.mode === "overview") this.drawHeat(c);
  if (this.showWindows) this.drawWindows(c, false);
  this.drawOps(c);
  if (this.showWaits) this.drawWaits(c);
  if (this.showWindows) this.drawWindows(c, true);
  this.drawHover(c);
  if (this.sel) {
    var a = Math.min(this.sel[0], this.sel[1]), b = Math.max(this.sel[0], this.sel[1]);
    c.fillStyle = "rgba(9,105,218,0.12)"; c.fillRect(a, this.axisH, b - a, H - this.axisH);
    c.strokeStyle = "rgba(9,105,218,0.8)"; c.lineWidth = 1;
    c.strokeRect(a + 0.5, this.axisH + 0.5, b - a, H - this.axisH - 1);
  }
  c.restore();
  this.drawLabels(c);
  this.drawMini();
  var v = this.view;
  this.rangeOut.textContent = "view " + fmtUs(v[0]) + " \u2013 " + fmtUs(v[1]) +
    "  (span " + fmtUs(v[1] - v[0]) + " of " + fmtUs(this.extent) + ")";
};

Gantt.prototype.drawAxis = function (c) {
  var W = this.W, H = this.H, v = this.view;
  c.fillStyle = "#f6f8fa"; c.fillRect(0, 0, W, this.axisH);
  c.fillStyle = "#fbfcfd"; c.fillRect(0, this.axisH, W, this.markH);
  c.strokeStyle = "#d0d7de"; c.lineWidth = 1;
  c.beginPath(); c.moveTo(0, this.axisH + 0.5); c.lineTo(W, this.axisH + 0.5);
  c.moveTo(0, this.lanesTop + 0.5); c.lineTo(W, this.lanesTop + 0.5); c.stroke();
  var step = niceStep(v[1] - v[0], this.plotW / 110);
  var t = Math.ceil(v[0] / step) * step;
  c.font = FONT; c.textBaseline = "middle";
  for (var n = 0; t <= v[1] + 1e-9 && n < 200; t += step, n++) {
    var x = Math.round(this.X(t)) + 0.5;
    c.strokeStyle = "#e6e9ed"; c.beginPath(); c.moveTo(x, this.lanesTop); c.lineTo(x, H); c.stroke();
    c.strokeStyle = "#8c959f"; c.beginPath(); c.moveTo(x, this.axisH - 5); c.lineTo(x, this.axisH); c.stroke();
    var lab = fmtTick(t, step);
    if (x + 4 + c.measureText(lab).width < W) { c.fillStyle = "#424a53"; c.fillText(lab, x + 3, this.axisH / 2); }
  }
};

Gantt.prototype.drawHeat = function (c) {
  var d = this.d, bins = d.bins, nb = bins.n, bw = this.extent / nb, v = this.view;
  var sc = this.plotW / (v[1] - v[0]);
  var i0 = Math.max(0, Math.floor(v[0] / bw)), i1 = Math.min(nb - 1, Math.floor(v[1] / bw));
  for (var k = 0; k < d.lanes.length; k++) {
    var y = this.laneY(k) + 4, h = this.laneH - 8;
    var wb = bins.wait[k], bb = bins.busy[k], i, x, w;
    if (wb) {
      c.fillStyle = "#8c959f";
      for (i = i0; i <= i1; i++) if (wb[i] > 0) {
        x = this.labelW + (i * bw - v[0]) * sc; w = Math.max(1, bw * sc);
        c.globalAlpha = 0.12 + 0.5 * wb[i] / 100; c.fillRect(x, y + h - 4, w, 4);
      }
    }
    c.fillStyle = ROLE_COLORS[d.lanes[k].role] || OTHER_COLOR;
    for (i = i0; i <= i1; i++) if (bb[i] > 0) {
      x = this.labelW + (i * bw - v[0]) * sc; w = Math.max(1, bw * sc);
      c.globalAlpha = 0.15 + 0.85 * bb[i] / 100; c.fillRect(x, y, w, h - 5);
    }
    c.globalAlpha = 1;
  }
  // regions with detailed bars: clear the heat there and frame them
  for (var j = 0; j < d.detailWindows.length; j++) {
    var a = this.X(d.detailWindows[j][0]), b = this.X(d.detailWindows[j][1]);
    if (b < this.labelW || a > this.W) continue;
    for (k = 0; k < d.lanes.length; k++) {
      c.fillStyle = k % 2 ? "#f7f8fa" : "#ffffff";
      c.fillRect(a, this.laneY(k), b - a, this.laneH);
    }
    c.strokeStyle = "#afb8c1"; c.setLineDash([2, 3]); c.lineWidth = 1;
    c.strokeRect(Math.round(a) + 0.5, this.lanesTop + 0.5, Math.round(b - a), this.H - this.lanesTop - 1);
    c.setLineDash([]);
  }
};

Gantt.prototype.drawOps = function (c) {
  var d = this.d, ops = d.ops, S = ops.s, D = ops.d, v = this.view;
  var sc = this.plotW / (v[1] - v[0]), x0 = this.labelW;
  var labels = [];
  for (var k = 0; k < d.lanes.length; k++) {
    var idx = this.laneOps[k];
    if (!idx.length) continue;
    var y = this.laneY(k) + 4, h = this.laneH - 8, cur = null;
    var lastPx = -1;
    for (var p = lowerBound(idx, S, v[0] - this.laneMax[k]); p < idx.length; p++) {
      var i = idx[p], st = S[i];
      if (st > v[1]) break;
      var en = st + D[i];
      if (en < v[0]) continue;
      var xa = x0 + (st - v[0]) * sc, w = D[i] * sc;
      if (w < 1) {               // sub-pixel op: one 1px column per pixel is enough
        var px = Math.floor(xa);
        if (px === lastPx) continue;
        lastPx = px; xa = px; w = 1;
      } else if (w > 3) { w -= 0.5; }
      var col = this.opColor(i, k);
      if (col !== cur) { c.fillStyle = col; cur = col; }
      c.fillRect(xa, y, w, h);
      if (w > 34) labels.push(i, xa, w, y + h / 2, col);
    }
  }
  c.font = FONT; c.textBaseline = "middle";
  var cw = c.measureText("abcdefghij").width / 10;
  for (var q = 0; q < labels.length; q += 5) {
    var name = (d.short || d.names)[ops.n[labels[q]]] || "";
    var left = Math.max(labels[q + 1], x0) + 4, room = labels[q + 1] + labels[q + 2] - left - 4;
    var chars = Math.floor(room / cw);
    if (chars < 3) continue;
    var txt = name.length > chars ? name.slice(0, chars - 1) + "\u2026" : name;
    c.fillStyle = DARK_TEXT[labels[q + 4]] ? "#1f2328" : "#ffffff";
    c.fillText(txt, left, labels[q + 3]);
  }
};

Gantt.prototype.drawWaits = function (c) {
  var d = this.d, w = d.waits, S = w.s, D = w.d, v = this.view;
  var sc = this.plotW / (v[1] - v[0]), x0 = this.labelW;
  var pat = this.waitPattern(c);
  var arrows = [];
  for (var k = 0; k < d.lanes.length; k++) {
    var idx = this.laneWaits[k];
    if (!idx.length) continue;
    var y = this.laneY(k) + 4, h = this.laneH - 8;
    for (var p = lowerBound(idx, S, v[0] - this.laneWaitMax[k]); p < idx.length; p++) {
      var i = idx[p], st = S[i];
      if (st > v[1]) break;
      if (st + D[i] < v[0]) continue;
      var xa = x0 + (st - v[0]) * sc, ww = Math.max(1, D[i] * sc);
      c.fillStyle = pat; c.fillRect(xa, y, ww, h);
      if (ww > 3) { c.strokeStyle = "#6e7781"; c.lineWidth = 1; c.strokeRect(xa + 0.5, y + 0.5, ww - 1, h - 1); }
      if (w.on[i] >= 0 && w.on[i] !== k && ww > 2) arrows.push(xa + ww, w.on[i], k);
    }
  }
  c.strokeStyle = "rgba(87,96,106,0.75)"; c.fillStyle = "rgba(87,96,106,0.9)"; c.lineWidth = 1;
  for (var q = 0; q < arrows.length; q += 3) {
    var x = Math.round(arrows[q]) + 0.5, from = arrows[q + 1], to = arrows[q + 2];
    var y0 = this.laneY(from) + this.laneH / 2, y1 = to > from ? this.laneY(to) + 4 : this.laneY(to) + this.laneH - 4;
    c.setLineDash([3, 2]); c.beginPath(); c.moveTo(x, y0); c.lineTo(x, y1); c.stroke(); c.setLineDash([]);
    var dir = y1 > y0 ? 1 : -1;
    c.beginPath(); c.moveTo(x, y1); c.lineTo(x - 3, y1 - 5 * dir); c.lineTo(x + 3, y1 - 5 * dir); c.closePath(); c.fill();
  }
};

Gantt.prototype.drawWindows = function (c, front) {
  var d = this.d, L = d.lanes.length, self = this;
  function rect(lane, win) {
    if (lane < 0 || lane >= L || !win) return null;
    var a = self.X(win[0]), b = self.X(win[1]);
    return [a, self.laneY(lane) + 1, Math.max(2, b - a), self.laneH - 2];
  }
  var lastLabel = -1e9;
  for (var i = 0; i < d.points.length; i++) {
    var p = d.points[i], col = VERDICT_COLORS[p.verdict] || OTHER_COLOR;
    var focus = i === this.focus;
    var sr = rect(p.lane, p.side), dr = p.dom ? rect(p.dom.lane, p.dom.w) : null;
    if (!front) {
      c.fillStyle = col;
      c.globalAlpha = 0.14;
      if (sr) c.fillRect(sr[0], sr[1], sr[2], sr[3]);
      if (dr) c.fillRect(dr[0], dr[1], dr[2], dr[3]);
      if (sr && dr) {           // the overlap of the two windows, across the lanes between them
        var a = Math.max(sr[0], dr[0]), b = Math.min(sr[0] + sr[2], dr[0] + dr[2]);
        if (b > a) {
          var top = Math.min(sr[1], dr[1]), bot = Math.max(sr[1] + sr[3], dr[1] + dr[3]);
          c.globalAlpha = 0.10; c.fillRect(a, top, b - a, bot - top);
        }
      }
      c.globalAlpha = 1;
      continue;
    }
    c.strokeStyle = col;
    c.lineWidth = focus ? 2.5 : 1.5;
    if (sr) { c.setLineDash([5, 3]); c.strokeRect(sr[0] + 0.5, sr[1] + 0.5, sr[2] - 1, sr[3] - 1); c.setLineDash([]); }
    c.lineWidth = focus ? 3 : 2;
    if (dr) c.strokeRect(dr[0] + 1, dr[1] + 1, dr[2] - 2, dr[3] - 2);
    // marker strip: a bracket over the side window and the point's tag
    var my = this.axisH + 3, mh = this.markH - 6;
    if (sr && sr[0] + sr[2] >= this.labelW && sr[0] <= this.W) {
      c.fillStyle = col; c.globalAlpha = 0.25; c.fillRect(sr[0], my, sr[2], mh); c.globalAlpha = 1;
      c.fillRect(sr[0], my, Math.min(sr[2], 2), mh);
      var tag = "P" + p.i + " " + p.verdict + (p.pct !== null ? " " + p.pct.toFixed(2) : "");
      c.font = FONT;
      var tw = c.measureText(tag).width;
      var tx = Math.min(Math.max(sr[0] + 4, this.labelW + 2), this.W - tw - 4);
      if (tx > lastLabel + 6) {
        c.fillStyle = "#1f2328"; c.fillText(tag, tx, my + mh / 2 + 0.5); lastLabel = tx + tw;
      }
    }
    if (p.barrier && p.barrier.t !== null) {
      var bx = Math.round(this.X(p.barrier.t)) + 0.5, bl = p.barrier.lane;
      var ybot = bl >= 0 && bl < L ? this.laneY(bl) + this.laneH : this.H;
      c.strokeStyle = BARRIER_COLOR; c.lineWidth = 1.5;
      c.beginPath(); c.moveTo(bx, this.axisH + 2); c.lineTo(bx, ybot); c.stroke();
      c.fillStyle = BARRIER_COLOR;
      c.beginPath(); c.moveTo(bx - 5, this.axisH + 2); c.lineTo(bx + 5, this.axisH + 2);
      c.lineTo(bx, this.axisH + 10); c.closePath(); c.fill();
    }
  }
};

Gantt.prototype.drawHover = function (c) {
  var h = this.hover;
  if (!h || (h.type !== "op" && h.type !== "wait")) return;
  var col = h.type === "op" ? this.d.ops : this.d.waits;
  var a = this.X(col.s[h.i]), w = Math.max(1, col.d[h.i] * this.plotW / (this.view[1] - this.view[0]));
  c.strokeStyle = "#111"; c.lineWidth = 1.5;
  c.strokeRect(a - 1, this.laneY(h.lane) + 3, w + 2, this.laneH - 6);
};

Gantt.prototype.drawLabels = function (c) {
  var d = this.d, lw = this.labelW;
  c.fillStyle = "#ffffff"; c.fillRect(0, this.axisH, lw, this.H - this.axisH);
  c.fillStyle = "#f6f8fa"; c.fillRect(0, 0, lw, this.axisH);
  c.fillStyle = "#fbfcfd"; c.fillRect(0, this.axisH, lw, this.markH);
  c.font = FONT; c.textBaseline = "middle"; c.fillStyle = "#656d76";
  c.fillText("time from start", 8, this.axisH / 2);
  c.fillText("parallel points", 8, this.axisH + this.markH / 2);
  for (var k = 0; k < d.lanes.length; k++) {
    var ln = d.lanes[k], y = this.laneY(k), col = ROLE_COLORS[ln.role] || OTHER_COLOR;
    c.fillStyle = k % 2 ? "#f7f8fa" : "#ffffff"; c.fillRect(0, y, lw, this.laneH);
    c.fillStyle = col; c.fillRect(0, y + 3, 3, this.laneH - 6);
    c.font = FONT;
    var role = ln.role, rw = c.measureText(role).width + 10;
    c.strokeStyle = col; c.lineWidth = 1;
    c.strokeRect(lw - rw - 7.5, y + 5.5, rw, this.laneH - 11);
    c.fillStyle = col; c.fillText(role, lw - rw - 2.5, y + this.laneH / 2);
    c.font = FONT_B; c.fillStyle = "#1f2328";
    var label = "stream " + ln.id, room = lw - rw - 22;
    while (label.length > 4 && c.measureText(label).width > room) label = label.slice(0, -2) + "\u2026";
    c.fillText(label, 10, y + this.laneH / 2);
  }
  c.strokeStyle = "#d0d7de"; c.lineWidth = 1;
  c.beginPath(); c.moveTo(lw - 0.5, 0); c.lineTo(lw - 0.5, this.H); c.stroke();
  c.beginPath(); c.moveTo(0, this.axisH + 0.5); c.lineTo(lw, this.axisH + 0.5);
  c.moveTo(0, this.lanesTop + 0.5); c.lineTo(lw, this.lanesTop + 0.5); c.stroke();
  if (!d.ops.s.length && !d.waits.s.length && d.mode === "detail") {
    c.fillStyle = "#656d76"; c.font = FONT_B;
    c.fillText("no ops in this capture", lw + 12, this.lanesTop + this.laneH / 2);
  }
};

Gantt.prototype.drawMini = function () {
  var c = this.mctx, d = this.d, W = this.MW, H = this.MH, L = Math.max(1, d.lanes.length);
  c.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
  if (!this.miniImg) {
    c.clearRect(0, 0, W, H);
    c.fillStyle = "#fbfcfd"; c.fillRect(0, 0, W, H);
    var nb = d.bins.n, bw = W / nb, lh = (H - 8) / L;
    for (var k = 0; k < d.lanes.length; k++) {
      var bb = d.bins.busy[k], y = 2 + k * lh, h = Math.max(1, lh - (lh > 3 ? 1 : 0));
      c.fillStyle = ROLE_COLORS[d.lanes[k].role] || OTHER_COLOR;
      for (var i = 0; i < nb; i++) if (bb[i] > 0) {
        c.globalAlpha = 0.2 + 0.8 * bb[i] / 100; c.fillRect(i * bw, y, Math.max(bw, 0.6), h);
      }
    }
    c.globalAlpha = 1;
    for (var j = 0; j < d.points.length; j++) {
      var p = d.points[j];
      if (!p.side) continue;
      c.fillStyle = VERDICT_COLORS[p.verdict] || OTHER_COLOR;
      var a = p.side[0] / this.extent * W, b = p.side[1] / this.extent * W;
      c.fillRect(a, H - 5, Math.max(2, b - a), 4);
    }
    this.miniImg = c.getImageData(0, 0, this.mini.width, this.mini.height);
  } else {
    c.putImageData(this.miniImg, 0, 0);
  }
  var v = this.view, x0 = v[0] / this.extent * W, x1 = v[1] / this.extent * W;
  c.fillStyle = "rgba(31,35,40,0.16)";
  c.fillRect(0, 0, x0, H); c.fillRect(x1, 0, W - x1, H);
  c.strokeStyle = "#0969da"; c.lineWidth = 1.5;
  c.strokeRect(x0 + 0.75, 0.75, Math.max(2, x1 - x0 - 1.5), H - 1.5);
  if (this.miniSel) {
    var sa = Math.min(this.miniSel[0], this.miniSel[1]), sb = Math.max(this.miniSel[0], this.miniSel[1]);
    c.fillStyle = "rgba(9,105,218,0.18)"; c.fillRect(sa, 0, sb - sa, H);
  }
};

// ---------------------------------------------------------------- hit testing and tooltip
Gantt.prototype.hit = function (mx, my) {
  var d = this.d;
  if (mx < this.labelW || my < this.axisH || my > this.H) return null;
  var span = this.view[1] - this.view[0], t = this.T(mx), tol = 2 * span / this.plotW;
  var i, best, bestScore, p, s, e;
  if (my < this.lanesTop) {
    for (i = 0; i < d.points.length; i++) {
      p = d.points[i];
      if (p.barrier && p.barrier.t !== null && Math.abs(p.barrier.t - t) <= 3 * tol) return {type: "barrier", p: i};
    }
    for (i = 0; i < d.points.length; i++) {
      p = d.points[i];
      if (p.side && t >= p.side[0] - tol && t <= p.side[1] + tol) return {type: "point", p: i};
    }
    return null;
  }
  var k = Math.floor((my - this.lanesTop) / this.laneH);
  if (k < 0 || k >= d.lanes.length) return null;
  var groups = [["op", d.ops, this.laneOps[k], this.laneMax[k]]];
  if (this.showWaits) groups.push(["wait", d.waits, this.laneWaits[k], this.laneWaitMax[k]]);
  for (var g = 0; g < groups.length; g++) {
    var col = groups[g][1], idx = groups[g][2];
    best = -1; bestScore = Infinity;
    for (var q = lowerBound(idx, col.s, t - groups[g][3] - tol); q < idx.length; q++) {
      i = idx[q]; s = col.s[i];
      if (s > t + tol) break;
      e = s + col.d[i];
      if (e < t - tol) continue;
      var dist = t < s ? s - t : t > e ? t - e : 0;
      var score = dist * 1e6 + col.d[i];
      if (score < bestScore) { bestScore = score; best = i; }
    }
    if (best >= 0) return {type: groups[g][0], i: best, lane: k};
  }
  if (this.showWindows) {
    for (i = 0; i < d.points.length; i++) {
      p = d.points[i];
      if (p.lane === k && p.side && t >= p.side[0] && t <= p.side[1]) return {type: "point", p: i};
      if (p.dom && p.dom.lane === k && p.dom.w && t >= p.dom.w[0] && t <= p.dom.w[1]) return {type: "point", p: i};
    }
  }
  if (d.mode === "overview") {
    var bw = this.extent / d.bins.n, b = Math.floor(t / bw);
    if (b >= 0 && b < d.bins.n) return {type: "bin", lane: k, b: b};
  }
  return null;
};

Gantt.prototype.tipLines = function (h) {
  var d = this.d, lines = [], lane, p;
  function row(label, value) { lines.push([label, value]); }
  if (h.type === "op") {
    var o = d.ops, i = h.i;
    lane = d.lanes[h.lane];
    lines.title = (d.short || d.names)[o.n[i]] || "(unnamed)";
    if (d.short && d.short[o.n[i]] !== d.names[o.n[i]]) lines.full = d.names[o.n[i]];
    row("stream", lane.id + " (" + lane.role + ")");
    var what = [];
    if (d.types[o.t[i]]) what.push(d.types[o.t[i]]);
    what.push(d.kinds[o.k[i]] || "?");
    if (o.c[i] > 0 && d.cores[o.c[i]]) what.push(d.cores[o.c[i]]);
    row("type", what.join(" \u00b7 "));
    if (o.b[i] >= 0) row("block dim", String(o.b[i]));
    row("start", fmtUs(o.s[i])); row("duration", fmtUs(o.d[i])); row("end", fmtUs(o.s[i] + o.d[i]));
  } else if (h.type === "wait") {
    var w = d.waits;
    lane = d.lanes[h.lane];
    lines.title = (d.names[w.n[h.i]] || "wait") + "  [wait]";
    row("stream", lane.id + " (" + lane.role + ") waits");
    if (w.on[h.i] >= 0) row("on stream", d.lanes[w.on[h.i]].id);
    row("start", fmtUs(w.s[h.i])); row("duration", fmtUs(w.d[h.i]));
  } else if (h.type === "point" || h.type === "barrier") {
    p = d.points[h.p];
    if (h.type === "barrier") {
      lines.title = "barrier of P" + p.i + ": " + (p.barrier.short || p.barrier.name);
      if (p.barrier.short && p.barrier.short !== p.barrier.name) lines.full = p.barrier.name;
      row("starts", fmtUs(p.barrier.t));
    } else {
      lines.title = "parallel point P" + p.i + ": " + p.verdict;
    }
    var sl = d.lanes[p.lane];
    if (p.side) row("side window", (sl ? "stream " + sl.id + " " : "") + "[" + fmtUs(p.side[0]) + ", " + fmtUs(p.side[1]) + "]");
    if (p.dom) {
      row("dominator", p.dom.short || p.dom.name);
      if (p.dom.w) row("dominator window", "[" + fmtUs(p.dom.w[0]) + ", " + fmtUs(p.dom.w[1]) + "]");
    }
    row("overlap", fmtUs(p.ov));
    if (p.pct !== null) row("overlap_pct", p.pct.toFixed(3));
  } else if (h.type === "bin") {
    var bw = this.extent / d.bins.n;
    lane = d.lanes[h.lane];
    lines.title = "stream " + lane.id + " (binned overview)";
    row("bin", "[" + fmtUs(h.b * bw) + ", " + fmtUs((h.b + 1) * bw) + "]");
    row("busy", d.bins.busy[h.lane][h.b] + "%");
    var wb = d.bins.wait[h.lane];
    if (wb) row("waiting", wb[h.b] + "%");
  }
  return lines;
};

Gantt.prototype.showTip = function (h, mx, my) {
  var tip = this.tip;
  if (!h) { tip.hidden = true; return; }
  var lines = this.tipLines(h);
  while (tip.firstChild) tip.removeChild(tip.firstChild);
  tip.appendChild(el("div", "t-name", lines.title || ""));
  if (lines.full) tip.appendChild(el("div", "t-full", lines.full));
  for (var i = 0; i < lines.length; i++) {
    var r = el("div", "t-row", lines[i][0] + " ");
    r.appendChild(el("b", "", lines[i][1]));
    tip.appendChild(r);
  }
  tip.hidden = false;
  var wrap = this.canvas.parentNode, tw = tip.offsetWidth, th = tip.offsetHeight;
  var x = mx + 14, y = my + 16;
  if (x + tw > wrap.clientWidth) x = Math.max(0, mx - tw - 14);
  if (y + th > this.H + 60) y = Math.max(0, my - th - 10);
  tip.style.left = x + "px"; tip.style.top = y + "px";
};

// ---------------------------------------------------------------- input
Gantt.prototype.pos = function (ev, target) {
  var r = (target || this.canvas).getBoundingClientRect();
  return {x: ev.clientX - r.left, y: ev.clientY - r.top};
};

Gantt.prototype.bind = function () {
  var self = this, cv = this.canvas, mini = this.mini;
  function guard(f) {
    return function (ev) { try { f(ev); } catch (e) { fail(e && e.message ? e.message : String(e)); } };
  }
  cv.addEventListener("wheel", guard(function (ev) {
    ev.preventDefault();
    var p = self.pos(ev), scale = ev.deltaMode === 1 ? 40 : ev.deltaMode === 2 ? 400 : 1;
    var dx = ev.deltaX * scale, dy = ev.deltaY * scale;
    if (ev.shiftKey || Math.abs(dx) > Math.abs(dy)) {
      self.pan((Math.abs(dx) > Math.abs(dy) ? dx : dy) / self.plotW);
    } else {
      var anchor = p.x >= self.labelW ? self.T(p.x) : undefined;
      self.zoom(Math.exp(clamp(dy, -400, 400) * 0.0018), anchor);
    }
  }), {passive: false});
  cv.addEventListener("mousedown", guard(function (ev) {
    if (ev.button !== 0) return;
    var p = self.pos(ev);
    if (p.x < self.labelW) return;
    ev.preventDefault();
    if (cv.focus) cv.focus({preventScroll: true});
    self.drag = {x: p.x, v: self.view.slice(), mode: ev.shiftKey ? "select" : "pan", moved: false};
    self.showTip(null);
    if (self.drag.mode === "pan") cv.classList.add("dragging");
  }));
  window.addEventListener("mousemove", guard(function (ev) {
    var g = self.drag;
    if (!g) return;
    var p = self.pos(ev);
    if (Math.abs(p.x - g.x) > 2) g.moved = true;
    if (g.mode === "pan") {
      var dt = (p.x - g.x) * (g.v[1] - g.v[0]) / self.plotW;
      self.setView(g.v[0] - dt, g.v[1] - dt);
    } else {
      self.sel = [g.x, clamp(p.x, self.labelW, self.labelW + self.plotW)];
      self.request();
    }
  }));
  window.addEventListener("mouseup", guard(function () {
    var g = self.drag;
    if (!g) return;
    self.drag = null;
    cv.classList.remove("dragging");
    if (g.mode === "select" && g.moved && self.sel) {
      var a = self.T(Math.min(self.sel[0], self.sel[1])), b = self.T(Math.max(self.sel[0], self.sel[1]));
      self.sel = null;
      self.setView(a, b);
    } else {
      self.sel = null;
      self.request();
    }
  }));
  cv.addEventListener("mousemove", guard(function (ev) {
    if (self.drag) return;
    var p = self.pos(ev), h = self.hit(p.x, p.y);
    var prev = self.hover;
    self.hover = h;
    self.showTip(h, p.x, p.y);
    if ((prev && prev.i) !== (h && h.i) || (prev && prev.type) !== (h && h.type)) self.request();
  }));
  cv.addEventListener("mouseleave", guard(function () {
    self.hover = null; self.showTip(null); self.request();
  }));
  cv.addEventListener("dblclick", guard(function () { self.reset(); }));
  cv.addEventListener("keydown", guard(function (ev) {
    var key = ev.key, used = true;
    if (key === "w" || key === "W" || key === "+" || key === "=") self.zoom(0.7);
    else if (key === "s" || key === "S" || key === "-") self.zoom(1 / 0.7);
    else if (key === "a" || key === "A" || key === "ArrowLeft") self.pan(-0.15);
    else if (key === "d" || key === "D" || key === "ArrowRight") self.pan(0.15);
    else if (key === "0" || key === "Home" || key === "Escape") self.reset();
    else used = false;
    if (used) ev.preventDefault();
  }));
  // minimap: drag to choose a range, click to centre the view there
  mini.addEventListener("mousedown", guard(function (ev) {
    if (ev.button !== 0) return;
    ev.preventDefault();
    var p = self.pos(ev, mini);
    self.miniDrag = {x: p.x, moved: false};
  }));
  window.addEventListener("mousemove", guard(function (ev) {
    var g = self.miniDrag;
    if (!g) return;
    var p = self.pos(ev, mini);
    if (Math.abs(p.x - g.x) > 2) g.moved = true;
    if (g.moved) { self.miniSel = [g.x, clamp(p.x, 0, self.MW)]; self.request(); }
  }));
  window.addEventListener("mouseup", guard(function (ev) {
    var g = self.miniDrag;
    if (!g) return;
    self.miniDrag = null;
    var toT = function (x) { return clamp(x, 0, self.MW) / self.MW * self.extent; };
    if (g.moved && self.miniSel) {
      var a = toT(Math.min(self.miniSel[0], self.miniSel[1])), b = toT(Math.max(self.miniSel[0], self.miniSel[1]));
      self.miniSel = null;
      self.setView(a, b);
    } else {
      var t = toT(self.pos(ev, mini).x), half = (self.view[1] - self.view[0]) / 2;
      self.miniSel = null;
      self.setView(t - half, t + half);
    }
  }));
  // toolbar
  var acts = this.box.querySelectorAll("[data-act]");
  for (var i = 0; i < acts.length; i++) {
    acts[i].addEventListener("click", guard(function (ev) {
      var a = ev.currentTarget.getAttribute("data-act");
      if (a === "in") self.zoom(0.6); else if (a === "out") self.zoom(1 / 0.6);
      else if (a === "left") self.pan(-0.25); else if (a === "right") self.pan(0.25);
      else self.reset();
    }));
  }
  var color = this.box.querySelector('[data-ctl="color"]');
  color.addEventListener("change", guard(function () { self.colorBy = color.value; self.buildLegend(); self.request(); }));
  var waits = this.box.querySelector('[data-ctl="waits"]');
  waits.addEventListener("change", guard(function () { self.showWaits = waits.checked; self.request(); }));
  var wins = this.box.querySelector('[data-ctl="windows"]');
  wins.addEventListener("change", guard(function () { self.showWindows = wins.checked; self.request(); }));
  // rows of the parallel points table zoom the chart
  var section = this.box.closest ? this.box.closest("section") : null;
  if (section) {
    var rows = section.querySelectorAll("tr[data-point]");
    for (var r = 0; r < rows.length; r++) {
      rows[r].addEventListener("click", guard(function (ev) {
        self.zoomToPoint(parseInt(ev.currentTarget.getAttribute("data-point"), 10));
        if (self.box.scrollIntoView) self.box.scrollIntoView({block: "nearest", behavior: "smooth"});
      }));
    }
  }
};

Gantt.prototype.buildLegend = function () {
  var out = this.legendOut, d = this.d;
  while (out.firstChild) out.removeChild(out.firstChild);
  function item(style, text) {
    var s = el("span"), sw = el("span", "sw");
    for (var key in style) sw.style[key] = style[key];
    s.appendChild(sw); s.appendChild(document.createTextNode(text)); out.appendChild(s);
  }
  if (this.colorBy === "kind") {
    for (var k = 0; k < d.kinds.length; k++) if (this.kindsPresent[k]) item({background: KIND_COLORS[k]}, d.kinds[k]);
  } else if (this.colorBy === "role") {
    for (var r in ROLE_COLORS) item({background: ROLE_COLORS[r]}, r + " stream");
  } else {
    item({background: "linear-gradient(90deg,#4e79a7,#59a14f,#e15759,#b07aa1)"}, "one colour per op name");
  }
  item({background: "repeating-linear-gradient(135deg,#8c959f 0 1.5px,#eef0f2 1.5px 4px)", border: "1px solid #6e7781"}, "wait");
  item({border: "1.5px dashed #57606a", background: "transparent"}, "side window");
  item({border: "2px solid #57606a", background: "transparent"}, "dominator window");
  for (var v in VERDICT_COLORS) item({background: VERDICT_COLORS[v]}, v);
  item({background: BARRIER_COLOR, width: "3px"}, "barrier");
  if (d.mode === "overview") item({background: "linear-gradient(90deg,rgba(78,121,167,.15),#4e79a7)"}, "busy fraction (binned)");
};

// ---------------------------------------------------------------- self test (#selftest)
function selftest(charts) {
  function check(ok, what) { if (!ok) throw new Error("selftest: " + what); }
  function mouse(target, type, x, y, extra) {
    var init = {clientX: x, clientY: y, bubbles: true, cancelable: true, button: 0};
    for (var k in extra || {}) init[k] = extra[k];
    target.dispatchEvent(type === "wheel" ? new WheelEvent(type, init) : new MouseEvent(type, init));
  }
  for (var c = 0; c < charts.length; c++) {
    var g = charts[c], r = g.canvas.getBoundingClientRect(), cx = r.left + g.labelW + g.plotW / 2;
    var cy = r.top + g.lanesTop + g.laneH / 2;
    mouse(g.canvas, "wheel", cx, cy, {deltaY: -240});
    g.draw();
    check(g.extent <= g.minSpan || g.view[1] - g.view[0] < g.extent, "wheel did not zoom");
    var before = g.view[0];
    mouse(g.canvas, "mousedown", cx, cy);
    mouse(window, "mousemove", cx + 80, cy);
    mouse(window, "mouseup", cx + 80, cy);
    g.draw();
    check(g.view[0] <= before, "drag did not pan");
    mouse(g.canvas, "dblclick", cx, cy);
    check(g.view[0] === 0 && g.view[1] === g.extent, "double click did not reset");
    g.draw();
    if (g.d.ops.s.length) {
      var o = g.d.ops, best = 0;
      for (var i = 1; i < o.d.length; i++) if (o.d[i] > o.d[best]) best = i;
      g.zoomToPoint(-1);
      g.setView(o.s[best] - o.d[best], o.s[best] + 2 * o.d[best] + g.minSpan);
      g.draw();
      r = g.canvas.getBoundingClientRect();
      var x = r.left + g.X(o.s[best] + o.d[best] / 2), y = r.top + g.laneY(o.lane[best]) + g.laneH / 2;
      mouse(g.canvas, "mousemove", x, y);
      check(!g.tip.hidden && g.hover && g.hover.type === "op", "hover shows no tooltip");
      mouse(g.canvas, "mouseleave", x, y);
    }
    ["role", "name", "kind"].forEach(function (m) { g.colorBy = m; g.buildLegend(); g.draw(); });
    for (var p = 0; p < g.d.points.length; p++) {
      g.zoomToPoint(p); g.draw();
      var pr = g.pointRange(g.d.points[p]);
      r = g.canvas.getBoundingClientRect();
      if (pr && g.d.points[p].side) {
        var px = r.left + g.X((g.d.points[p].side[0] + g.d.points[p].side[1]) / 2);
        mouse(g.canvas, "mousemove", px, r.top + g.axisH + g.markH / 2);
        g.tipLines({type: "point", p: p});
      }
    }
    var m = g.mini.getBoundingClientRect();
    mouse(g.mini, "mousedown", m.left + 10, m.top + 10);
    mouse(window, "mousemove", m.left + 60, m.top + 10);
    mouse(window, "mouseup", m.left + 60, m.top + 10);
    g.canvas.dispatchEvent(new KeyboardEvent("keydown", {key: "w", bubbles: true}));
    g.canvas.dispatchEvent(new KeyboardEvent("keydown", {key: "d", bubbles: true}));
    g.draw();
    g.reset(); g.draw();
    if (g.d.ops.s.length || g.d.mode === "overview") {
      // something was painted in the lanes: count saturated (bar-coloured) pixels
      var ctx = g.ctx, dpr = g.dpr;
      var img = ctx.getImageData(Math.round(g.labelW * dpr), Math.round(g.lanesTop * dpr),
        Math.round(g.plotW * dpr), Math.round((g.H - g.lanesTop) * dpr)).data;
      var painted = 0;
      for (var q = 0; q < img.length; q += 4) {
        if (Math.abs(img[q] - img[q + 1]) + Math.abs(img[q + 1] - img[q + 2]) > 40) painted++;
      }
      check(painted > 50, "no bars painted");
      g.painted = painted;
    }
  }
}

function init() {
  var blocks = document.querySelectorAll(".gantt"), charts = [];
  for (var i = 0; i < blocks.length; i++) {
    try {
      var data = JSON.parse(blocks[i].querySelector("script.gantt-data").textContent);
      charts.push(new Gantt(blocks[i], data));
    } catch (e) {
      fail("capture " + (i + 1) + ": " + (e && e.message ? e.message : String(e)));
    }
  }
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(function () {
      for (var j = 0; j < charts.length; j++) {
        try { charts[j].resize(); } catch (e) { fail(e.message || String(e)); }
      }
    }, 80);
  });
  window.parastreamCharts = charts;
  // deep links: #view=a,b (microseconds) or #point=N zoom every chart on load
  var hv = /view=([-0-9.e]+),([-0-9.e]+)/.exec(location.hash), hp = /point=(\d+)/.exec(location.hash);
  for (var c = 0; c < charts.length; c++) {
    if (hv) { charts[c].setView(parseFloat(hv[1]), parseFloat(hv[2])); charts[c].draw(); }
    else if (hp) { charts[c].zoomToPoint(parseInt(hp[1], 10) - 1); charts[c].draw(); }
  }
  if (/selftest/.test(location.hash)) {
    try { selftest(charts); } catch (e) { fail(e && e.message ? e.message : String(e)); }
  }
  if (!failed) root.setAttribute("data-parastream", "ok");
}
try { init(); } catch (e) { fail(e && e.message ? e.message : String(e)); }
})();

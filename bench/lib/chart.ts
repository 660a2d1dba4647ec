/**
 * A hand-written SVG line chart: throughput (log scale) against concurrency (log scale),
 * one line per series. No dependency; the output is a plain file the report links.
 */

const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** Renders `series` (name → [x, y][]) as an SVG document. */
export function lineChart(title: string, series: Record<string, Array<[number, number]>>): string {
  const width = 760;
  const height = 440;
  const m = { left: 70, right: 250, top: 40, bottom: 50 };
  const points = Object.values(series)
    .flat()
    .filter(([x, y]) => x > 0 && y > 0);
  const xs = [...new Set(points.map(([x]) => x))].sort((a, b) => a - b);
  const yMin = 10 ** Math.floor(Math.log10(Math.min(...points.map(([, y]) => y))));
  const yMax = 10 ** Math.ceil(Math.log10(Math.max(...points.map(([, y]) => y))));
  const xMin = Math.min(...xs);
  const xMax = Math.max(...xs);
  const plotW = width - m.left - m.right;
  const plotH = height - m.top - m.bottom;
  const sx = (x: number) => m.left + (xMax === xMin ? plotW / 2 : ((Math.log(x) - Math.log(xMin)) / (Math.log(xMax) - Math.log(xMin))) * plotW);
  const sy = (y: number) => m.top + plotH - ((Math.log10(y) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin))) * plotH;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${m.left}" y="22" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
  ];
  for (let decade = yMin; decade <= yMax; decade *= 10) {
    for (const k of [1, 2, 5]) {
      const y = decade * k;
      if (y > yMax) break;
      out.push(`<line x1="${m.left}" x2="${m.left + plotW}" y1="${sy(y).toFixed(1)}" y2="${sy(y).toFixed(1)}" stroke="${k === 1 ? '#ccc' : '#eee'}"/>`);
      out.push(`<text x="${m.left - 6}" y="${(sy(y) + 4).toFixed(1)}" text-anchor="end">${y.toLocaleString('en-US')}</text>`);
    }
  }
  for (const x of xs) {
    out.push(`<line x1="${sx(x).toFixed(1)}" x2="${sx(x).toFixed(1)}" y1="${m.top}" y2="${m.top + plotH}" stroke="#eee"/>`);
    out.push(`<text x="${sx(x).toFixed(1)}" y="${m.top + plotH + 18}" text-anchor="middle">${x}</text>`);
  }
  out.push(`<text x="${m.left + plotW / 2}" y="${height - 10}" text-anchor="middle">concurrency (log scale)</text>`);
  out.push(`<text transform="translate(16 ${m.top + plotH / 2}) rotate(-90)" text-anchor="middle">operations per second (log scale)</text>`);
  out.push(`<rect x="${m.left}" y="${m.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#888"/>`);
  Object.entries(series).forEach(([name, data], i) => {
    const color = COLORS[i % COLORS.length];
    const dashed = /raw|pgbench/.test(name) ? ' stroke-dasharray="6 4"' : '';
    const pts = data.filter(([x, y]) => x > 0 && y > 0).sort((a, b) => a[0] - b[0]);
    if (pts.length > 1) {
      out.push(
        `<polyline fill="none" stroke="${color}" stroke-width="2"${dashed} points="${pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ')}"/>`,
      );
    }
    for (const [x, y] of pts) out.push(`<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="3" fill="${color}"/>`);
    const ly = m.top + 10 + i * 20;
    out.push(`<line x1="${m.left + plotW + 15}" x2="${m.left + plotW + 40}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${dashed}/>`);
    out.push(`<text x="${m.left + plotW + 46}" y="${ly + 4}">${escapeXml(name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

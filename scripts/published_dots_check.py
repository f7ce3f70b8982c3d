#!/usr/bin/env python3
"""Rough check of a track.csv on shared/data/real_rally_a.mp4 against the green dots drawn into
the video (the published model's detections): each dot that appears in frame i is matched to our
detection in frame i-1 or i. Usage: published_dots_check.py VIDEO TRACK.csv [TRACK.csv ...]"""
import cv2, numpy as np, csv, sys
cap=cv2.VideoCapture(sys.argv[1])
frames_dots=[]
while True:
    ok,f=cap.read()
    if not ok: break
    b,g,r=[f[...,k].astype(int) for k in range(3)]
    m=((g>180)&(r<120)&(b<120)).astype(np.uint8)
    n,lab,st,cen=cv2.connectedComponentsWithStats(m,8)
    frames_dots.append([(cen[k][0],cen[k][1]) for k in range(1,n) if 3<=st[k,4]<=80])
new={}
for i in range(1,len(frames_dots)):
    old=np.array(frames_dots[i-1]) if frames_dots[i-1] else np.zeros((0,2))
    for (x,y) in frames_dots[i]:
        if len(old)==0 or np.min(np.hypot(old[:,0]-x,old[:,1]-y))>4:
            new.setdefault(i,[]).append((x,y))
print('frames with a new dot', len(new), 'of', len(frames_dots))
for name in sys.argv[2:]:
    rows=list(csv.DictReader(open(name)))
    hit=miss=0; near=[]
    for i,dots in new.items():
        r=rows[i]
        # a new dot drawn in frame i may be the detection of frame i-1 or i
        cands=[rows[j] for j in (i-1,i) if 0<=j<len(rows) and rows[j]['visible']=='1']
        d=min((np.hypot(float(c['x'])-x,float(c['y'])-y) for c in cands for (x,y) in dots), default=1e9)
        near.append(d)
        hit+= d<=8
    near=np.array(near)
    print(name, 'visible', sum(r['visible']=='1' for r in rows), 'matched new dots (<=8px)', hit, 'of', len(new), 'median dist', np.median(near[near<1e8]) if (near<1e8).any() else None)

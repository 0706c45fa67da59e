-- Visits, distinct customers and average spend per weekday.
-- Run: dpsql run queries/visits_by_day.sql --metadata data/visits.yaml --epsilon 1
-- Each customer counts in at most 7 days with at most 8 visits each (see data/visits.yaml).
SELECT day,
       COUNT(*)            AS visits,
       COUNT(DISTINCT uid) AS customers,
       AVG(amount)         AS avg_amount
FROM visits
GROUP BY day
ORDER BY visits DESC;
